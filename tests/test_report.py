"""Reports of a run folder: the CSV schema, report.html, summary.md, junit.xml, the report
command, and the HTML as a person sees it in headless Chromium."""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pandas as pd
import pytest

from parity.cli import main
from parity.report import html as html_report
from parity.report import svg
from parity.report.text import MAX_MARKDOWN
from parity.report.write import write_all
from parity.runfolder import ResultsWriter, parse_results, read_rows
from parity.sweep import COLUMNS
from tests.report_fixtures import CASES, NEEDS_GPU, OFF_BY_ONE, RAISES, shared_run

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_dir(tmp_path_factory, tmp_path) -> Path:
    return shared_run(tmp_path_factory, tmp_path / "run")


@pytest.fixture
def rendered(run_dir) -> Path:
    write_all(run_dir)
    return run_dir


def test_readme_results_table_matches_the_csv_columns(run_dir):
    text = (ROOT / "README.md").read_text()
    section = text.split("### Results", 1)[1].split("\n#", 1)[0]
    documented = []
    for line in section.splitlines():
        if line.startswith("| `"):
            documented += re.findall(r"`([a-z_]+)`", line.split("|")[1])
    assert sorted(documented) == sorted(COLUMNS)
    df = pd.read_csv(run_dir / "results.csv")  # the README's promise: one pandas call
    assert list(df.columns) == COLUMNS
    assert len(df) == len(CASES) * 4


def test_write_all_writes_self_contained_files(rendered):
    names = sorted(p.name for p in write_all(rendered))
    assert names == ["coverage.csv", "junit.xml", "report.html", "summary.md"]
    page = (rendered / "report.html").read_text()
    # nothing fetched from anywhere: no remote src/href/url(), no script
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "url(" not in page and "<script" not in page and "@import" not in page
    for anchor in (
        'id="matrix"',
        'id="coverage-table"',
        'id="worst"',
        'id="plot-edge"',
        'id="plot-ratio"',
        'id="masks"',
        'id="environment"',
    ):
        assert anchor in page
    assert 'id="decode"' not in page  # no decode.csv in this run


def _chip_counts(cell_html: str) -> dict[str, int]:
    return {label: int(n) for n, label in re.findall(r'title="(\d+) ([a-z /]+)"', cell_html)}


def test_matrix_counts_match_the_csv(rendered):
    page = (rendered / "report.html").read_text()
    df = pd.read_csv(rendered / "results.csv", dtype=str, keep_default_na=False)
    rows = re.findall(r"<tr><td class=\"be\"><code>(.*?)</code></td>(.*?)</tr>", page)
    assert [html.unescape(b) for b, _ in rows] == list(dict.fromkeys(df["backend"]))
    for b, cells in rows:
        sub = df[df["backend"] == html.unescape(b)]
        for fam, dt, cell in re.findall(r'data-family="([^"]+)" data-dtype="([^"]+)">(.*?)</td>', cells):
            got = _chip_counts(cell)
            part = sub[(sub["family"] == fam) & (sub["dtype"] == dt)]["verdict"].value_counts().to_dict()
            want = {}
            for verdicts, _, label in html_report.CHIPS:
                n = sum(part.get(v, 0) for v in verdicts)
                if n:
                    want[label] = n
            assert got == want, (b, fam, dt)
    # the families and dtypes of the run all have a column
    assert set(re.findall(r'data-family="([^"]+)"', page)) == {"dense", "decode", "varlen", "chunked", "paged"}
    assert set(re.findall(r'data-dtype="([^"]+)"', page)) == {"bfloat16", "float16"}


def test_worst_cases_carry_repro_and_the_mask_words(rendered):
    page = html.unescape((rendered / "report.html").read_text())
    worst = page.split('id="worst"', 1)[1].split("</section>", 1)[0]
    assert f"python -m parity run --backend {OFF_BY_ONE} --case " in worst
    assert "window is one token wider on the left" in worst
    assert "kernel launch failed: invalid configuration argument" in worst  # the error row's detail
    assert "sdpa</code>:" not in worst  # sdpa passes everything it ran: no heading of its own
    assert "needs a CUDA device (none here)" in page  # the unavailable backend's reason, in the environment


def test_shrunk_cases_are_shown_with_their_repro(rendered):
    small = CASES[0].__class__.from_json(CASES[0].to_json())
    entry = {
        "backend": OFF_BY_ONE,
        "from": CASES[0].case_id,
        "case": json.loads(small.to_json()),
        "verdict": "fail",
        "reasons": "mask",
        "calls": 7,
        "repro": small.repro(OFF_BY_ONE),
    }
    (rendered / "shrunk.jsonl").write_text(json.dumps(entry) + "\n" + '{"cut short')
    write_all(rendered)
    worst = html.unescape((rendered / "report.html").read_text().split('id="worst"', 1)[1].split("</section>", 1)[0])
    assert f"Smallest failing case found by shrinking case {CASES[0].case_id} (7 calls)" in worst
    assert small.repro(OFF_BY_ONE) in worst
    assert "smallest failing case found by shrinking" in (rendered / "summary.md").read_text()


def test_edge_and_ratio_plots_draw_one_point_per_row(rendered):
    page = (rendered / "report.html").read_text()
    df = pd.read_csv(rendered / "results.csv")
    ran = df[df["verdict"].isin(["pass", "fail"])]
    edge = page.split('id="plot-edge"', 1)[1].split("</svg>", 1)[0]
    ratio = page.split('id="plot-ratio"', 1)[1].split("</svg>", 1)[0]
    assert edge.count('class="pt"') == int(ran["worst_left_edge"].notna().sum()) > 0
    assert ratio.count('class="pt"') == int(ran["err_ratio"].notna().sum())
    filled = len(re.findall(r'class="pt" [^>]*fill="#', edge))  # failing rows are drawn filled, passing hollow
    assert filled == int(((ran["verdict"] == "fail") & ran["worst_left_edge"].notna()).sum()) > 0
    assert "rows not drawn: their window has no left edge" in page  # the Window(None, 0) case


def test_environment_of_a_gpu_run_is_shown(rendered):
    env = json.loads((rendered / "environment.json").read_text())
    env["gpu"] = {
        "available": True,
        "name": "NVIDIA H200",
        "count": 8,
        "memory_gib": 139.8,
        "capability": "9.0",
        "cuda": "12.8",
        "driver": "570.86",
    }
    (rendered / "environment.json").write_text(json.dumps(env))
    write_all(rendered)
    want = "8 x NVIDIA H200, 139.8 GiB, sm 9.0, CUDA 12.8, driver 570.86"
    assert want in (rendered / "report.html").read_text().split('id="environment"', 1)[1]
    assert f"GPU: {want}" in (rendered / "summary.md").read_text()


def test_plots_keep_every_failing_row_when_thinned():
    rows = [{"backend": "a", "verdict": "pass", "i": i} for i in range(100)] + [{"backend": "a", "verdict": "fail", "i": -1}] * 7
    rows += [{"backend": "b", "verdict": "pass", "i": i} for i in range(5)]
    kept, left_out = html_report.thin(rows, 20)
    a = [r for r in kept if r["backend"] == "a"]
    assert len(a) == 20 and sum(r["verdict"] == "fail" for r in a) == 7
    assert sorted(r["i"] for r in a if r["verdict"] == "pass")[:3] == [0, 7, 15]  # an even sample
    assert len([r for r in kept if r["backend"] == "b"]) == 5 and left_out == 100 - 13


def test_mask_image_draws_the_probe_characters():
    out = svg.mask_image(["1+..", "-p11"], "t")
    rects = re.findall(r'<rect class="m(.)" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" height="[\d.]+" fill="(#\w+)"', out)
    cells = [(cls, float(x), float(y), float(w), fill) for cls, x, y, w, fill in rects]
    c, h = 8.0, 16.0  # 4 columns: cells of the maximum width; 2 rows: drawn taller so they stay visible
    assert cells == [
        ("s", 0.0, 0.0, c, svg.MASK_COLOURS["1"]),
        ("x", c, 0.0, c, svg.MASK_COLOURS["+"]),
        ("x", 0.0, h, c, svg.MASK_COLOURS["-"]),
        ("x", c, h, c, svg.MASK_COLOURS["p"]),
        ("s", 2 * c, h, 2 * c, svg.MASK_COLOURS["1"]),  # run-length encoded
    ]


def test_failing_case_mask_is_drawn_from_masks_jsonl(rendered):
    page = (rendered / "report.html").read_text()
    masks = [json.loads(x) for x in (rendered / "masks.jsonl").read_text().splitlines()]
    assert masks and all(m["backend"] == OFF_BY_ONE for m in masks)
    section = page.split('id="masks"', 1)[1].split("</section>", 1)[0]
    assert section.count("<figure") == min(len(masks), html_report.MAX_MASKS)
    assert 'class="mx"' in section and f'fill="{svg.MASK_COLOURS["+"]}"' in section  # the extra key, in red
    assert "one token wider on the left" in html.unescape(section)


def test_gzipped_masks_of_a_committed_run_are_drawn_the_same(rendered, tmp_path):
    """A committed run keeps masks.jsonl gzipped (and no report.html): the report draws them the same."""
    import gzip
    import shutil

    packed = tmp_path / "packed"
    shutil.copytree(rendered, packed)
    (packed / "masks.jsonl.gz").write_bytes(gzip.compress((packed / "masks.jsonl").read_bytes()))
    (packed / "masks.jsonl").unlink()
    (packed / "report.html").unlink()
    write_all(packed)

    def masks(page: str) -> str:
        return page.split('id="masks"', 1)[1].split("</section>", 1)[0]

    want = masks((rendered / "report.html").read_text())
    assert "<figure" in want and masks((packed / "report.html").read_text()) == want


def test_summary_markdown_fits_a_pull_request_comment(rendered):
    md = (rendered / "summary.md").read_text()
    df = pd.read_csv(rendered / "results.csv")
    bad = int(df["verdict"].isin(["fail", "error", "crash", "timeout"]).sum())
    assert md.startswith(f"## attn-parity ❌ {bad} failing of {len(df)} rows")
    mine = df[df.backend == OFF_BY_ONE].verdict
    assert f"| `{OFF_BY_ONE}` | {(mine == 'pass').sum()} | **{(mine == 'fail').sum()}** |" in md
    assert "```bash" in md and f"--backend {OFF_BY_ONE} --case" in md
    assert NEEDS_GPU in md and "needs a CUDA device" in md
    assert len(md) < MAX_MARKDOWN


def test_junit_xml_counts_match(rendered):
    root = ET.parse(rendered / "junit.xml").getroot()
    df = pd.read_csv(rendered / "results.csv")
    v = df["verdict"].value_counts().to_dict()
    assert root.get("tests") == str(len(df))
    assert root.get("failures") == str(v.get("fail", 0))
    assert root.get("errors") == str(v.get("error", 0) + v.get("crash", 0) + v.get("timeout", 0))
    assert root.get("skipped") == str(v.get("unsupported", 0) + v.get("unavailable", 0))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {f"parity.{b}" for b in df["backend"].unique()}
    failure = suites[f"parity.{OFF_BY_ONE}"].find("testcase/failure")
    assert failure is not None and "mask" in failure.get("message") and "repro: python -m parity run" in failure.text
    assert suites[f"parity.{RAISES}"].find("testcase/error").get("type") == "parity.error"
    assert suites["parity.sdpa"].get("failures") == "0"


def test_decode_section_appears_with_decode_csv(rendered):
    (rendered / "decode").mkdir()
    rows = ["backend,case_id,step,max_abs_err,diverged"]
    rows += [f"sdpa,c1,{s},{1e-3 * (1 + s)},0" for s in range(6)] + [f"my-kernel,c1,{s},{0.01 * 2**s},{int(s > 3)}" for s in range(6)]
    (rendered / "decode" / "decode.csv").write_text("\n".join(rows) + "\n")
    write_all(rendered)
    page = (rendered / "report.html").read_text()
    section = page.split('id="decode"', 1)[1].split("</section>", 1)[0]
    assert 'id="plot-decode"' in section and section.count("<path ") == 2  # one line per backend
    assert section.count("<tr>") == 13  # header + 12 rows
    assert "Decode results: 12 rows" in (rendered / "summary.md").read_text()


def test_decode_section_reads_parity_decode_output(rendered):
    run_mod = pytest.importorskip("parity.decode.run")
    row = {c: "" for c in run_mod.COLUMNS}
    rows = [
        {**row, "backend": "sdpa", "model": "mistral", "prompt_len": "17", "verdict": "pass", "detail": "all tokens agree"},
        {**row, "backend": "bug", "model": "mistral", "prompt_len": "17", "verdict": "fail", "first_div_step": "3"},
    ]
    pd.DataFrame(rows, columns=run_mod.COLUMNS).to_csv(rendered / "decode.csv", index=False)
    steps = [
        {"backend": b, "model": "mistral", "prompt_id": "p17", "step": s, "max_abs_err": e * (s + 1), "kl": 0}
        for b, e in (("sdpa", 1e-6), ("bug", 1e-2))
        for s in range(5)
    ]
    pd.DataFrame(steps, columns=run_mod.STEP_COLUMNS).to_csv(rendered / "decode_steps.csv", index=False)
    write_all(rendered)
    section = (rendered / "report.html").read_text().split('id="decode"', 1)[1].split("</section>", 1)[0]
    assert "Verdicts per backend" in section and "From decode_steps.csv" in section
    assert section.count("<path ") == 2 and "all tokens agree" in section
    assert "(fail: 1, pass: 1)" in (rendered / "summary.md").read_text()


def test_a_torn_last_row_is_not_reported(run_dir, capsys):
    text = (run_dir / "results.csv").read_text()
    last = text.rstrip("\n").rsplit("\n", 1)[1]
    (run_dir / "results.csv").write_text(text + last[:40])  # killed while writing a row
    write_all(run_dir)
    root = ET.parse(run_dir / "junit.xml").getroot()
    assert root.get("tests") == str(len(CASES) * 4) and root.get("errors") == str(len(CASES) - 1)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"parity: note: {run_dir / 'results.csv'}: its last row has no newline (cut short by a kill mid-write): left out"]


def _torn(run_dir: Path, cut) -> tuple[str, list[str], list[str]]:
    """results.csv's text, header and last row's cells; the file gets that row once more, ``cut(row)`` of it."""
    text = (run_dir / "results.csv").read_text()
    last = text.rstrip("\n").rsplit("\n", 1)[1]
    header, cells = next(csv.reader([text.split("\n", 1)[0]])), next(csv.reader([last]))
    (run_dir / "results.csv").write_text(text + cut(header, cells))
    return text, header, cells


def _row(cells: list[str]) -> str:
    """A CSV row without its newline (a cell holding one quoted: a lineterminator of ``""`` would leave it bare)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    return buf.getvalue()[:-1]


def test_a_last_row_without_its_newline_is_not_reported(run_dir, capsys):
    """The writer ends every row with a newline: a last row without one is torn, cut past its verdict column
    (cells missing) or whole but for the newline alike; rows that end in one all read."""
    text = (run_dir / "results.csv").read_text()
    whole = [r for r in csv.DictReader(io.StringIO(text, newline="")) if r["verdict"]]
    assert [r.cells for r in read_rows(run_dir)] == whole and capsys.readouterr().err == ""  # every row finished
    _torn(run_dir, lambda header, cells: _row(cells[: header.index("verdict") + 2]))  # the verdict and one cell more
    assert [r.cells for r in read_rows(run_dir)] == whole
    (run_dir / "results.csv").write_text(text)
    _torn(run_dir, lambda header, cells: _row(cells))  # the same row whole, without its newline
    assert [r.cells for r in read_rows(run_dir)] == whole
    assert capsys.readouterr().err.count("its last row has no newline") == 2


def test_a_last_row_torn_inside_its_last_cell_is_not_reported(run_dir, capsys):
    """Torn inside its last cell, a row has every column: only the missing newline marks it (the reports took it
    as a row, its last cell cut short)."""
    detail = "a graph note the kill cut short"
    text, header, cells = _torn(run_dir, lambda header, cells: _row([*cells[:-1], detail])[:-6])
    assert cells[header.index("verdict")] and header[-1] == "graph_detail"
    rows = read_rows(run_dir)
    assert len(rows) == len(CASES) * 4 and not any(r["graph_detail"] == detail[:-6] for r in rows)
    assert f"{run_dir / 'results.csv'}: its last row has no newline" in capsys.readouterr().err
    (run_dir / "results.csv").write_text(text + _row([*cells[:-1], detail]) + "\n")  # whole, it is a row
    assert read_rows(run_dir)[-1]["graph_detail"] == detail and capsys.readouterr().err == ""


def test_resume_and_the_readers_cut_a_torn_row_alike(run_dir, capsys):
    """A torn last row whose quoted cell holds a newline goes whole (not only its last line), for the reports
    and for --resume, which cuts the file there."""
    text, _, _ = _torn(run_dir, lambda header, cells: _row([*cells[:-1], "line one\nline two"])[:-3])
    assert read_rows(run_dir) == list(parse_results(run_dir / "results.csv", text).rows)
    assert capsys.readouterr().err.count("its last row has no newline") == 1
    ResultsWriter(run_dir, resume=True).close()
    assert (run_dir / "results.csv").read_text() == text


def test_report_command_and_its_exit_codes(run_dir, tmp_path, capsys):
    assert main(["report", str(run_dir)]) == 0
    assert (run_dir / "report.html").exists() and (run_dir / "junit.xml").exists()
    assert main(["report", str(run_dir), "--out", str(tmp_path / "o")]) == 0
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["coverage.csv", "junit.xml", "report.html", "summary.md"]
    assert main(["report", str(run_dir), "--strict"]) == 1  # the run has failures
    capsys.readouterr()
    assert main(["report", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"parity: error: {tmp_path / 'nope'}: no such folder"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "results.csv").write_text("backend,verdict\nsdpa,pass\n")
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing columns: case_id, family, dtype" in err[0]
    (tmp_path / "file").write_text("")
    assert main(["report", str(run_dir), "--out", str(tmp_path / "file" / "sub")]) == 2
    assert "cannot write the reports" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty)]) == 2
    assert "results.csv: no such file" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["report", "diff", "evidence"])
def test_a_verdict_cell_that_is_not_a_verdict_is_refused(command, run_dir, tmp_path, capsys):
    """A hand-edited or foreign results.csv whose verdict column holds another word (here "passed" in row 3) was
    read as a row of no verdict: each reader passed it through with exit 0."""
    from parity.results import Outcome

    good = shutil.copytree(run_dir, tmp_path / "good")
    df = pd.read_csv(run_dir / "results.csv", dtype=str, keep_default_na=False)
    df.loc[2, "verdict"] = "passed"
    df.to_csv(run_dir / "results.csv", index=False)
    out = str(tmp_path / "o")
    argv = {
        "report": ["report", str(run_dir), "--out", out],
        "diff": ["diff", str(good), str(run_dir), "--out", out],
        "evidence": ["evidence", str(run_dir), "--out", out],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    valid = ", ".join(o.value for o in Outcome)
    assert err == [f"parity: error: {run_dir / 'results.csv'}, row 3: verdict 'passed' is not a verdict (valid: {valid})"], err


def test_run_command_writes_the_reports(tmp_path):
    code = main(["run", "--backend", "sdpa", "--case", CASES[0].to_json(), "--out", str(tmp_path), "-q", "--no-isolate"])
    assert code == 0
    assert {"report.html", "summary.md", "junit.xml"} <= {p.name for p in tmp_path.iterdir()}
    assert (tmp_path / "summary.md").read_text().startswith("## attn-parity ✅ PASS: 1 rows ran and passed, 0 skipped")


def test_a_run_where_nothing_ran_is_not_called_a_pass(run_dir):
    df = pd.read_csv(run_dir / "results.csv", dtype=str, keep_default_na=False)
    df[df["verdict"].isin(["unsupported", "unavailable"])].to_csv(run_dir / "results.csv", index=False)
    write_all(run_dir)
    assert (run_dir / "summary.md").read_text().startswith("## attn-parity ⚠️ NOTHING RAN")
    assert 'class="status bad">NOTHING RAN' in (run_dir / "report.html").read_text()
    df.head(0).to_csv(run_dir / "results.csv", index=False)  # header only: an empty run
    write_all(run_dir)
    assert "NOTHING RAN: 0 rows" in (run_dir / "summary.md").read_text()


# ---------------------------------------------------------------- in a real browser

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
PROBE = """<script>
const sel = {status: '#status .status', matrix: '#matrix-table', edge: '#plot-edge svg', ratio: '#plot-ratio svg',
             mask: 'figure.mask svg', env: '#env-table', repro: '.worst pre.repro'};
const out = {};
for (const [k, s] of Object.entries(sel)) {
  const el = document.querySelector(s);
  if (!el) { out[k] = 'missing'; continue; }
  const r = el.getBoundingClientRect(), cs = getComputedStyle(el);
  const shown = r.width > 20 && r.height > 10 && cs.visibility !== 'hidden' && cs.display !== 'none';
  out[k] = shown ? 'visible' : `hidden ${r.width}x${r.height}`;
}
const box = document.querySelector('#plot-edge svg').getBoundingClientRect();
const pts = [...document.querySelectorAll('#plot-edge .pt')].map(e => e.getBoundingClientRect());
out.points = pts.filter(r => r.width > 0).length;
out.outside = pts.filter(r => r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1).length;
out.scrollWidth = document.documentElement.scrollWidth;
out.statusText = document.querySelector('#status').innerText;
document.body.insertAdjacentHTML('beforeend', '<pre id="probe">' + JSON.stringify(out) + '</pre>');
</script>"""


def _chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
    if path is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("chromium is missing in CI: .ci/extra-setup should have installed it (apt-get install chromium)")
        pytest.skip("chromium not installed (apt-get install chromium; CI installs it via .ci/extra-setup)")
    return path


def test_browser_test_skips_locally_but_fails_in_ci_without_chromium(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os.path, "exists", lambda p: False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="chromium not installed"):
        _chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="chromium is missing in CI"):
        _chromium()


def _browser(chromium: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    profile.mkdir()
    return subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120)


def _png_pixels_vary(png: bytes) -> int:
    """Distinct byte values in the decompressed image data (a blank page has very few)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += png[pos + 8 : pos + 8 + n]
        pos += 12 + n
    return len(set(zlib.decompress(idat)[::7]))


def test_report_renders_in_headless_chromium(rendered, tmp_path):
    chromium = _chromium()
    page = (rendered / "report.html").read_text()
    probe_page = rendered / "probe.html"
    probe_page.write_text(page.replace("</body>", PROBE + "</body>"))
    p = _browser(chromium, tmp_path, "--window-size=1280,1000", "--dump-dom", probe_page.as_uri())
    m = re.search(r'<pre id="probe">(\{.*?)</pre>', p.stdout)
    assert m, p.stderr[-2000:]
    seen = json.loads(html.unescape(m.group(1)))
    for key in ("status", "matrix", "edge", "ratio", "mask", "env", "repro"):
        assert seen[key] == "visible", (key, seen)
    df = pd.read_csv(rendered / "results.csv")
    ran = df[df["verdict"].isin(["pass", "fail"])]
    assert seen["points"] == int(ran["worst_left_edge"].notna().sum())
    assert seen["outside"] == 0  # every point inside its plot
    assert seen["scrollWidth"] <= 1280  # no sideways scrolling at a laptop's width
    assert seen["statusText"].startswith("FAIL:")

    shot = tmp_path / "report.png"
    p = _browser(chromium, tmp_path, "--window-size=1280,2600", f"--screenshot={shot}", (rendered / "report.html").as_uri())
    assert shot.exists(), p.stderr[-2000:]
    data = shot.read_bytes()
    assert len(data) > 20_000 and _png_pixels_vary(data) > 50
    keep = os.environ.get("PARITY_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "report.png")
    print(f"screenshot: {shot}")


def test_the_smallest_failing_case_of_the_run_is_named_not_just_the_shrunk_one(rendered):
    """A run whose shrunk case is Sq=20, 4 heads, d=64 but which also has a failing row with Sq=1,
    Sk=2, 1 head, d=16: report.html and summary.md name the latter as the run's smallest."""
    from parity import Case, Window

    df = pd.read_csv(rendered / "results.csv", dtype=str, keep_default_na=False)
    tiny = Case(q_lens=(1,), k_lens=(2,), hq=1, hkv=1, head_dim=16, window=Window(1, 0), seed=11)
    row = df[(df["backend"] == OFF_BY_ONE) & (df["verdict"] == "fail")].iloc[0].copy()
    row.update(
        {
            "case_id": tiny.case_id,
            "q_lens": "1",
            "k_lens": "2",
            "hq": "1",
            "hkv": "1",
            "head_dim": "16",
            "window_left": "1",
            "case_json": tiny.to_json(),
            "repro": tiny.repro(OFF_BY_ONE),
        }
    )
    pd.concat([df, row.to_frame().T]).to_csv(rendered / "results.csv", index=False)
    big = Case(q_lens=(20,), k_lens=(20,), hq=4, hkv=4, head_dim=64, window=Window(4, 0), seed=3)
    entry = {
        "backend": OFF_BY_ONE,
        "from": CASES[0].case_id,
        "case": json.loads(big.to_json()),
        "verdict": "fail",
        "reasons": "mask",
        "calls": 40,
        "repro": big.repro(OFF_BY_ONE),
        "budget_exhausted": True,
        "note": "stopped at the budget of 40 calls (--shrink 40); a smaller case may exist",
    }
    (rendered / "shrunk.jsonl").write_text(json.dumps(entry) + "\n")
    write_all(rendered)
    page = html.unescape((rendered / "report.html").read_text())
    line = page.split("Smallest failing case of the run:", 1)[1].split("</div>", 1)[0]
    assert "Sq=1 Sk=2 h=1/1 d=16" in line and f"row {tiny.case_id}" in line and "(2 query x key elements x heads)" in line
    assert "stopped at the budget of 40 calls (--shrink 40)" in page  # the shrunk case is still shown, with its note
    md = (rendered / "summary.md").read_text()
    line = md.split("smallest failing case of the run:", 1)[1].split("\n", 1)[0]
    assert "Sq=1 Sk=2 h=1/1 d=16" in line and "Sq=20" not in line


WIDE_PROBE = """<script>
const W = window.innerWidth, out = {scrollWidth: document.documentElement.scrollWidth, cut: []};
const scrolls = el => { for (let a = el.parentElement; a; a = a.parentElement) {
  const ox = getComputedStyle(a).overflowX;
  if ((ox === 'auto' || ox === 'scroll') && a.getBoundingClientRect().right <= W + 1) return true; } return false; };
for (const el of document.body.querySelectorAll('*')) {
  const r = el.getBoundingClientRect();
  if (r.width > 0 && r.right > W + 1 && !scrolls(el))
    out.cut.push(el.tagName + (el.id ? '#' + el.id : '') + ' in ' + (el.closest('section') || {}).id + ' ' + Math.round(r.right));
}
out.cut = out.cut.slice(0, 12);
out.matrix = !!document.querySelector('#matrix-table');
document.body.insertAdjacentHTML('beforeend', '<pre id="probe">' + JSON.stringify(out) + '</pre>');
</script>"""
#: rows of the first H200 run (lab/runs/h200-2026-12-02): every one of 19 backends (tests/fixtures/make_lab_rows.py)
WIDE_RUN = ROOT / "tests" / "fixtures" / "lab-rows" / "h200-2026-12-02"


def test_a_wide_real_run_fits_1280_px_in_headless_chromium(tmp_path):
    """Rows of an H200 run (19 backends: a wide matrix) at 1280 px: no sideways scrolling of the
    page; anything wider than the window scrolls inside its own box (nothing is cut off)."""
    chromium = _chromium()
    if not (WIDE_RUN / "results.csv.gz").exists():
        pytest.skip(f"{WIDE_RUN} is not in this checkout")
    run = tmp_path / "wide"
    run.mkdir()
    for name in ("results.csv.gz", "environment.json", "masks.jsonl.gz", "shrunk.jsonl", "coverage.csv", "timing.json"):
        if (WIDE_RUN / name).exists():
            shutil.copy(WIDE_RUN / name, run / name)
    write_all(run)
    probe_page = run / "probe.html"
    probe_page.write_text((run / "report.html").read_text().replace("</body>", WIDE_PROBE + "</body>"))
    p = _browser(chromium, tmp_path, "--window-size=1280,1000", "--dump-dom", probe_page.as_uri())
    m = re.search(r'<pre id="probe">(\{.*?)</pre>', p.stdout)
    assert m, p.stderr[-2000:]
    seen = json.loads(html.unescape(m.group(1)))
    assert seen["matrix"]
    assert seen["cut"] == [], seen  # wider than the window and not inside a box that scrolls
    assert seen["scrollWidth"] <= 1280, seen

    shot = tmp_path / "report-wide.png"
    p = _browser(chromium, tmp_path, "--window-size=1280,2600", f"--screenshot={shot}", (run / "report.html").as_uri())
    assert shot.exists(), p.stderr[-2000:]
    assert _png_pixels_vary(shot.read_bytes()) > 50
    keep = os.environ.get("PARITY_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "report-wide.png")
    print(f"screenshot (1280 px): {shot}")
