"""A run folder and every file in it, in one place: which files there are, where the rows are
(``results.csv``, or ``results.csv.gz`` in a committed run), how each is read and written.

==================  =========================================================================
``results.csv``     the rows (:data:`parity.results.COLUMNS`), appended and flushed one by one
                    (:class:`ResultsWriter`); a committed run keeps them as ``results.csv.gz``
``results.json``    the same rows as one JSON list (:func:`write_json`)
``environment.json``  what the run ran on and what it was (:func:`write_environment`)
``masks.jsonl``     the mask probes' pictures (``.gz`` in a committed run)
``shrunk.jsonl``    the shrunk failing cases (``.gz`` in a committed run)
``timing.json``     where the wall time went (:func:`write_timing`)
``coverage.csv``    backends x coverage cells (:func:`write_table`, rows from :mod:`parity.coverage`)
``stages.jsonl``    where each row's time went, one line per row (:func:`open_jsonl`)
``logs/``           one log per worker unit (:func:`log_path`) and the compile pre-pass's
``consistency.csv`` decode vs prefill checks, appended (:func:`append_consistency`)
``decode.csv``      greedy-decode results and the language-model study (``lm_decode.csv``, ...):
                    named, read and written by :mod:`parity.runfolder_decode`
==================  =========================================================================

Every file name but the decode ones is a constant here, and each such file is read and written here:
no module of ``parity/`` but this one and :mod:`parity.runfolder_decode` spells a run folder's file name
(``tests/test_runfolder_owns.py`` checks it). Where a committed run keeps a file gzipped (``NAME.gz``),
its reader reads either.

A folder's rows are read once (:func:`read_results`) and handed to whoever needs them (coverage,
the reports, results.json, the summary of a resumed run). Imports only ``errors``, ``files`` and
``results``.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import json
import os
import re
import sys
from collections.abc import Container, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from .case import Case
from .errors import UserError
from .files import read_text
from .results import ADDED_COLUMNS, COLUMNS, Judged, Outcome

RESULTS = "results.csv"
RESULTS_GZ = "results.csv.gz"
RESULTS_JSON = "results.json"
ENVIRONMENT = "environment.json"
MASKS = "masks.jsonl"
SHRUNK = "shrunk.jsonl"
TIMING = "timing.json"
COVERAGE = "coverage.csv"
CONSISTENCY = "consistency.csv"
STAGES = "stages.jsonl"
LOGS = "logs"
#: What ``environment.json`` keeps of each earlier, cut-short run into a resumed folder.
EARLIER_KEEP = (
    "date_utc",
    "command",
    "argv",
    "wall_seconds",
    "partial",
    "partial_why",
    "in_progress",
    "rows_run",
    "rows_planned",
    "jobs",
    "backends",
    "torch",
)


@dataclasses.dataclass(frozen=True)
class ResultRow(Mapping[str, str]):
    """One row of results.csv: its cells by column, as written (strings; ``""`` for empty).
    Reads like the dict it was (``row["verdict"]``, ``row.get("gpu")``); :meth:`csv_cells` is
    the row in :data:`COLUMNS` order, what is written."""

    cells: Mapping[str, str]

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> ResultRow:
        """A row from a dict of cells (a column it lacks is empty; a ``None`` cell is empty)."""
        return row if isinstance(row, ResultRow) else cls({k: "" if v is None else v for k, v in row.items() if k is not None})

    def __getitem__(self, column: str) -> str:
        return self.cells[column]

    def __iter__(self) -> Iterator[str]:
        return iter(self.cells)

    def __len__(self) -> int:
        return len(self.cells)

    @property
    def key(self) -> tuple[str, str]:
        """(backend, case_id): one row per pair in a folder."""
        return (str(self.cells.get("backend", "")), str(self.cells.get("case_id", "")))

    def csv_cells(self) -> dict[str, Any]:
        """The row as results.csv has it: every column of :data:`COLUMNS`, in order."""
        return {c: self.cells.get(c, "") for c in COLUMNS}


@dataclasses.dataclass(frozen=True)
class Results:
    """A folder's rows as read once: the file, its header, the finished rows (a torn last row of a
    killed run is not one: :func:`finished_part`)."""

    path: Path
    fields: tuple[str, ...]
    rows: tuple[ResultRow, ...]


def results_path(folder: Path) -> Path | None:
    """``folder/results.csv``, else ``folder/results.csv.gz`` (a committed run), else None."""
    for name in (RESULTS, RESULTS_GZ):
        if (folder / name).exists():
            return folder / name
    return None


def holds_run(folder: Path) -> bool:
    """Whether ``folder`` holds a run's rows."""
    return results_path(folder) is not None


def finished_part(text: str) -> str:
    """The whole rows of a results CSV's ``text``, the one rule of the readers and ``--resume``: all of it when it
    ends in a newline (the writer ends every row with one); else all but its last record, a row (or header) torn
    by a kill mid-write, cut at the newline that ended the record before it (a quoted cell may hold newlines)."""
    if not text or text.endswith("\n"):
        return text
    lines = io.StringIO(text, newline="").readlines()  # split as the csv reader splits them
    reader = csv.reader(lines)
    begin = last = 0  # the line the next record begins on; the line the last one began on
    try:
        for _ in reader:
            last, begin = begin, reader.line_num
    except csv.Error:  # not a CSV: its last line goes, and the reader names the fault
        return text[: text.rfind("\n") + 1]
    return "".join(lines[:last])


def parse_results(path: Path, text: str) -> Results:
    """The rows of a results CSV's ``text`` (the file ``path``): those with a verdict, less a last one cut short by
    a kill mid-write (:func:`finished_part`; stderr says so, naming the file)."""
    whole = finished_part(text)
    if whole != text:
        print(f"parity: note: {path}: its last row has no newline (cut short by a kill mid-write): left out", file=sys.stderr)
    reader = csv.DictReader(io.StringIO(whole, newline=""))
    try:
        records = list(reader)
    except csv.Error as exc:
        raise UserError(f"{path}: not a readable CSV ({exc})") from None
    if reader.fieldnames is None:
        raise UserError(f"{path}: not a readable CSV (No columns to parse from file)")
    fill = [{k: "" if v is None else v for k, v in r.items()} for r in records]  # a short row: empty cells, as before
    _check_verdicts(path, fill)
    rows = tuple(ResultRow.of(r) for r in fill if r.get("verdict"))
    return Results(path, tuple(reader.fieldnames), rows)


def _check_verdicts(path: Path, records: list[dict[str, str]]) -> None:
    """A UserError naming the file, the row (1: the first under the header) and the word of the first verdict cell
    that is not a verdict (:class:`parity.results.Outcome`): the reports would count its row as none of them."""
    for number, record in enumerate(records, 1):
        word = record.get("verdict")
        if word and Outcome.of(word) is None:
            valid = ", ".join(o.value for o in Outcome)
            raise UserError(f"{path}, row {number}: verdict {word!r} is not a verdict (valid: {valid})")


def read_results(folder: Path) -> Results | None:
    """The folder's rows (results.csv or results.csv.gz), read once; None when it holds none."""
    path = results_path(folder)
    return None if path is None else read_results_file(path)


def read_results_file(path: Path) -> Results:
    """The rows of a results file named by the user (plain or gzipped)."""
    return parse_results(path, read_text(path))


def run_folders_under(root: Path) -> set[Path]:
    """Every folder at or under ``root`` that holds a run's rows (results.csv or results.csv.gz)."""
    return {p.parent for p in root.glob(f"**/{RESULTS}*") if p.name in (RESULTS, RESULTS_GZ)}


def rewrite_results(folder: Path, path: Path | None, frame: Any) -> Path:
    """``frame`` (a pandas DataFrame of the results columns: ``parity report --rewrite-results``) written
    over the file its rows came from (``path``; else the folder's results.csv), by pandas; that path."""
    path = path or folder / RESULTS
    frame.to_csv(path, index=False)
    return path


def read_rows(folder: Path) -> list[ResultRow]:
    """The folder's finished rows; ``[]`` when it holds none."""
    res = read_results(folder)
    return list(res.rows) if res else []


def stored_path(folder: Path, name: str) -> Path:
    """``folder/name``, or ``folder/name.gz`` when only that is there (a committed run)."""
    path, packed = folder / name, folder / (name + ".gz")
    return packed if not path.exists() and packed.exists() else path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The objects of a .jsonl file (or its .gz); a line cut short by an interrupted run is skipped."""
    path = stored_path(path.parent, path.name)
    out: list[dict[str, Any]] = []
    if path.exists():
        for line in read_text(path).splitlines():
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
    return out


#: The JSON type of the fields of environment.json / timing.json that readers take apart (a field may be null).
_NUMBER = (int, float)
ENVIRONMENT_FIELDS: dict[str, type | tuple[type, ...]] = {
    **dict.fromkeys(("gpu", "backends", "splits", "budgets", "design", "expectations", "compile_cache", "shard"), dict),
    **dict.fromkeys(("shims", "argv", "gpus", "earlier_runs"), list),
}
TIMING_FIELDS: dict[str, type | tuple[type, ...]] = {
    **dict.fromkeys(("lane_overhead_share", "per_gpu", "shard", "precompile", "per_backend", "stages", "gate"), dict),
    **dict.fromkeys(("reference_stages_s", "all_calls", "auto_split"), dict),
    **dict.fromkeys(("lanes", "gpus", "earlier_calls", "runs"), list),
    **dict.fromkeys(("wall_s", "startup_s", "reference_s", "backend_calls_s", "rows_run", "jobs"), _NUMBER),
}


def misshapen(doc: object, fields: Mapping[str, type | tuple[type, ...]]) -> str | None:
    """What is wrong with the shape of a JSON document that should be an object with ``fields`` of these
    types (None or absent is fine); None when nothing is."""
    if not isinstance(doc, dict):
        return f"expected a JSON object, got {type(doc).__name__}"
    for key, want in fields.items():
        value = doc.get(key)
        if value is not None and (not isinstance(value, want) or isinstance(value, bool) and want is _NUMBER):
            kind = {dict: "an object", list: "an array", _NUMBER: "a number"}[want]  # type: ignore[index]
            return f"field {key!r} must be {kind} or null, got {type(value).__name__} {json.dumps(value)[:40]}"
    return None


def read_object(path: Path, fields: Mapping[str, type | tuple[type, ...]]) -> dict[str, Any]:
    """A JSON file of a run folder (plain or gzipped) that must be an object with ``fields`` of their types
    (:func:`misshapen`); a UserError naming ``path`` when it is not valid JSON or not of that shape."""
    try:
        doc = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc})") from None
    wrong = misshapen(doc, fields)
    if wrong:
        raise UserError(f"{path}: {wrong}")
    return doc


def read_environment(folder: Path) -> dict[str, Any] | None:
    """``environment.json`` (or its .gz; None when there is none); a UserError when it is not a JSON object of
    :data:`ENVIRONMENT_FIELDS`' shape."""
    path = stored_path(folder, ENVIRONMENT)
    return read_object(path, ENVIRONMENT_FIELDS) if path.exists() else None


def write_environment(folder: Path, environment: dict[str, Any], keep_earlier: bool = False) -> Path:
    """``environment.json``, written atomically (a kill never leaves half a file); ``keep_earlier`` (--resume):
    what the earlier, cut-short runs into the folder were goes into ``earlier_runs``. A run writes it twice, in
    progress (``in_progress``, before its first row: what a killed run leaves) and at its end: the file of the same
    ``run_id`` in progress is this run's own, replaced, not an earlier run (one killed keeps its record)."""
    path = folder / ENVIRONMENT
    if keep_earlier and path.exists():
        try:
            prev = json.loads(path.read_text())
            own = prev.get("in_progress") and prev.get("run_id") and prev.get("run_id") == environment.get("run_id")
            mine = [] if own else [{k: prev.get(k) for k in EARLIER_KEEP}]
            earlier = [*prev.get("earlier_runs", []), *mine]
            if earlier:
                environment["earlier_runs"] = earlier
        except (OSError, ValueError, AttributeError):
            pass
    tmp = folder / (ENVIRONMENT + ".tmp")
    tmp.write_text(json.dumps(environment, indent=2, default=str) + "\n")
    tmp.replace(path)
    return path


#: How :func:`backend_versions` names a backend whose calls into one folder recorded different versions.
MIXED = "mixed: "


def backend_versions(environment: Mapping[str, Any]) -> dict[str, str]:
    """Each backend's version over every call into a run folder (``environment.json``'s ``backends``, then its
    ``earlier_runs``' newest first), the one place the reports read it: a resumed call where a backend was unavailable
    records no version, and its rows came from the calls that had one.

    ====================================  =========================
    versions the calls recorded           the backend's version
    ====================================  =========================
    ``0.26.0`` (and ``""`` in another)     ``0.26.0``
    none (unavailable in every call)      ``""``
    ``0.33.0`` now, ``0.26.0`` before      ``mixed: 0.33.0; 0.26.0`` (never read as one version)
    ====================================  =========================
    """
    found: dict[str, list[str]] = {}
    for call in _calls(environment):
        infos = call.get("backends")
        for name, info in (infos or {}).items():
            version = str(info.get("version") or "") if isinstance(info, dict) else ""
            seen = found.setdefault(name, [])
            if version and version not in seen:
                seen.append(version)
    return {name: _one_or_mixed(vs) for name, vs in found.items()}


def torch_version(environment: Mapping[str, Any]) -> str:
    """The torch of every call into a run folder (``environment.json``'s ``torch``, then its ``earlier_runs``'), as
    :func:`backend_versions` reads a backend's: one, or ``mixed: A; B`` (an entry's torch range then matches none)."""
    found: list[str] = []
    for call in _calls(environment):
        torch = str(call.get("torch") or "")
        if torch and torch not in found:
            found.append(torch)
    return _one_or_mixed(found)


def _calls(environment: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``environment.json`` and its ``earlier_runs``, newest first (an entry that is not an object left out)."""
    return [c for c in [environment, *reversed(environment.get("earlier_runs") or [])] if isinstance(c, Mapping)]


def _one_or_mixed(versions: list[str]) -> str:
    """The distinct non-empty versions the calls recorded, newest first: one (or ``""``), else :data:`MIXED` all."""
    return "; ".join(versions) if len(versions) < 2 else MIXED + "; ".join(versions)


def read_timing(folder: Path) -> dict[str, Any]:
    """``timing.json`` (or its .gz in a committed run; {} when absent, torn (it is rewritten after every case) or
    of the wrong shape (:data:`TIMING_FIELDS`): the reports then go without the run's timing)."""
    try:
        timing = json.loads(read_text(stored_path(folder, TIMING)))
    except (OSError, ValueError, UserError):
        return {}
    return {} if misshapen(timing, TIMING_FIELDS) else timing


def write_timing(folder: Path, timing: Mapping[str, Any]) -> None:
    """``timing.json``, written atomically (a kill never leaves half a file)."""
    tmp = folder / (TIMING + ".tmp")
    tmp.write_text(json.dumps(timing, indent=2) + "\n")
    tmp.replace(folder / TIMING)


def write_json(folder: Path, rows: Iterable[Mapping[str, str]]) -> None:
    """``results.json``: the rows (the same columns, as strings) as one JSON list."""
    try:
        (folder / RESULTS_JSON).write_text(json.dumps([dict(r) for r in rows], indent=1) + "\n")
    except OSError as exc:
        print(f"parity: results.json not written ({exc})", file=sys.stderr)


def write_table(path: Path, fields: Iterable[str], rows: Iterable[Mapping[str, Any]]) -> Path:
    """A CSV (coverage.csv, a merged results.csv, decode.csv) with this header; cells of other columns dropped."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(fields), extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def read_table(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """A CSV of a run folder (plain or gzipped): its header and its rows as dicts."""
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    return list(reader.fieldnames or []), list(reader)


def tables(folder: Path, name: str) -> list[Path]:
    """``folder/name`` and each ``folder/*/name`` that is there (or its ``.gz`` when only that is), in order."""
    subs = sorted({p.parent for p in folder.glob(f"*/{name}*") if p.name in (name, name + ".gz")})
    return [p for p in (stored_path(d, name) for d in [folder, *subs]) if p.exists()]


def read_lines(folder: Path, name: str) -> list[str]:
    """The lines of a .jsonl file of the folder (or its .gz); ``[]`` when absent."""
    path = stored_path(folder, name)
    return read_text(path).splitlines() if path.exists() else []


def write_lines(folder: Path, name: str, lines: list[str]) -> Path:
    """A .jsonl file of the folder: ``lines``, one per line."""
    path = folder / name
    path.write_text("\n".join(lines) + "\n")
    return path


def open_jsonl(folder: Path, name: str, append: bool) -> Any:
    """A .jsonl file of the folder (``stages.jsonl``, ``shrunk.jsonl``) open for writing, appended to on ``--resume``."""
    return (folder / name).open("a" if append else "w")


def log_path(folder: Path, unit: str) -> Path:
    """``logs/UNIT.log``: one worker unit's log (its folder made)."""
    return logs_dir(folder) / f"{unit}.log"


def logs_dir(folder: Path) -> Path:
    """``logs/``: the workers' and the compile pre-pass's logs (made when absent)."""
    logs = folder / LOGS
    logs.mkdir(parents=True, exist_ok=True)
    return logs


def read_consistency(folder: Path) -> list[dict[str, str]]:
    """``consistency.csv`` (or its .gz): its rows that name a backend; ``[]`` when absent."""
    path = stored_path(folder, CONSISTENCY)
    return [r for r in read_table(path)[1] if r.get("backend")] if path.exists() else []


def append_consistency(folder: Path, fields: list[str], rows: Iterable[Mapping[str, Any]]) -> Path:
    """Rows appended to ``consistency.csv`` (its header first when the file is new); a UserError naming it
    when the folder or the file cannot be written."""
    path = folder / CONSISTENCY
    try:
        folder.mkdir(parents=True, exist_ok=True)
        new = not path.exists()
        with path.open("a", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
            if new:
                w.writeheader()
            w.writerows(rows)
    except OSError as exc:
        raise UserError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


#: Where ``parity run`` puts a run without ``--out``: a new folder per run, ``reports/latest`` names the newest.
RUNS_DIR, LATEST = Path("reports/runs"), Path("reports/latest")


def latest_run(latest: Path = LATEST) -> Path:
    """The newest run folder: ``reports/latest`` (a symlink, or a folder of an older layout), else the
    folder ``reports/latest.txt`` names (platforms without symlinks)."""
    note = latest.with_name(latest.name + ".txt")
    if not latest.exists() and note.exists():
        return Path(note.read_text().strip())
    return latest


def newest_runs(n: int, runs: Path = RUNS_DIR) -> list[Path]:
    """The ``n`` newest run folders under ``runs`` (those holding results.csv or .csv.gz), oldest first:
    newest by name, ``DATE-TIME`` then its ``-2``, ``-3``, ... suffix (:func:`new_run_dir`)."""

    def order(p: Path) -> tuple[str, int]:
        m = re.fullmatch(r"(\d{8}-\d{6})-(\d+)", p.name)
        return (m.group(1), int(m.group(2))) if m else (p.name, 1)

    found = [p for p in runs.iterdir() if holds_run(p)] if runs.is_dir() else []
    return sorted(found, key=order)[-n:]


def new_run_dir(runs: Path = RUNS_DIR, latest: Path = LATEST, now: datetime.datetime | None = None) -> Path:
    """A new, empty run folder ``runs/YYYYMMDD-HHMMSS`` (``-2``, ``-3``, ... when taken), and ``latest``
    pointed at it: a symlink where the platform allows, else ``latest.txt`` naming it."""
    stamp = (now or datetime.datetime.now()).strftime("%Y%m%d-%H%M%S")
    runs.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        out = runs / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            out.mkdir()
            break
        except FileExistsError:
            continue
    note = latest.with_name(latest.name + ".txt")
    try:
        if latest.is_symlink():
            latest.unlink()
        if latest.exists():  # a real folder (an older layout): leave it, say it in latest.txt
            raise OSError("reports/latest is a folder")
        latest.symlink_to(os.path.relpath(out, latest.parent), target_is_directory=True)
        note.unlink(missing_ok=True)
    except (OSError, NotImplementedError):
        note.write_text(f"{out}\n")
    return out


def check_out_dir(out: Path, resume: bool, force: bool) -> None:
    """An explicit ``--out`` that already holds a run is refused unless ``--resume`` (continue it) or
    ``--force`` (replace it: its run files are removed, and stderr says so)."""
    held = results_path(out)
    if held is None or resume:
        return
    if not force:
        raise UserError(
            f"--out {out} already holds a run ({held.name}); add --resume to continue it, "
            "--force to replace it, or leave --out out for a new folder under reports/runs/"
        )
    import shutil

    print(f"parity: --force: replacing the run in {out}", file=sys.stderr)
    for p in out.iterdir():
        shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


class ResultsWriter:
    """Appends rows to ``DIR/results.csv`` (flushed per row) and mask images to ``masks.jsonl``.

    ``retry``: the (backend, case_id) rows this run will write; with ``resume``, an earlier ``unavailable`` row among
    them is dropped and tried again (the library may be installed now), never kept beside a new row."""

    def __init__(self, out_dir: Path, resume: bool = False, retry: Container[tuple[str, str]] = ()):
        self.dir = out_dir
        self.retry = retry
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / RESULTS
        self.done: set[tuple[str, str]] = set()
        mode = "w"
        if resume and not self.path.exists() and (self.dir / RESULTS_GZ).exists():
            self._unpack_gz()
        if resume and self.path.exists() and self._drop_torn_row():
            self._read_earlier_rows()
            mode = "a"
        self._fh = self.path.open(mode, newline="")
        self._csv = csv.DictWriter(self._fh, fieldnames=COLUMNS, extrasaction="ignore")
        if mode == "w":
            self._csv.writeheader()
            self._fh.flush()
        self._masks = (self.dir / MASKS).open("a" if resume else "w")

    def _unpack_gz(self) -> None:
        """--resume on a folder that keeps its rows gzipped (a committed report): they move to results.csv,
        the one file the rows are appended to and the reports read first."""
        gz = self.dir / RESULTS_GZ
        self.path.write_text(read_text(gz), encoding="utf-8")
        gz.unlink()
        print(f"parity: --resume: {gz} unpacked into results.csv (gzip it again to commit the folder)", file=sys.stderr)

    def _read_earlier_rows(self) -> None:
        """--resume: the finished rows of results.csv go into ``done``. One written before a column of
        ADDED_COLUMNS existed is rewritten with the full header (those cells empty; stderr says so);
        one without another column of COLUMNS, or with a column this version does not write, is refused."""
        fields, rows = read_table(self.path)
        missing = [c for c in COLUMNS if c not in fields]
        essential = [c for c in missing if c not in ADDED_COLUMNS and c not in DERIVED_COLUMNS]
        if essential:
            named = ", ".join(essential[:8]) + (f" and {len(essential) - 8} more" if len(essential) > 8 else "")
            raise UserError(f"--resume: {self.path} is not a results.csv of this tool (it lacks the columns {named}); start a new --out")
        extra = [c for c in fields if c not in COLUMNS]
        if extra:
            raise UserError(
                f"--resume: {self.path} has columns this attn-parity does not write ({', '.join(extra)}): "
                "a newer version's run; finish it with that version, or start a new --out"
            )
        _check_verdicts(self.path, rows)  # --resume would keep a row the reports count as no verdict
        if "repro" in missing:
            _derive_repro(rows)
            missing.remove("repro")
        kept: list[dict[str, str]] = []
        again: list[dict[str, str]] = []
        for r in rows:
            retried = r.get("verdict") == Outcome.UNAVAILABLE and (r.get("backend"), r.get("case_id")) in self.retry
            (again if retried else kept).append(r)
        rows = kept
        if again:
            names = ", ".join(sorted({r["backend"] for r in again}))
            print(f"parity: --resume: {len(again)} unavailable rows are tried again ({names})", file=sys.stderr)
        if fields != COLUMNS or again:
            self._rewrite(rows)
        if missing:
            s = "s" if len(missing) > 1 else ""
            words = "its rows have no GPU recorded" if missing == ["gpu"] else "they are left empty in its rows"
            print(f"parity: resuming a run written before the {', '.join(missing)} column{s}: {words}", file=sys.stderr)
        self.done = {(r["backend"], r["case_id"]) for r in rows if r.get("verdict")}

    def _rewrite(self, rows: list[dict[str, str]]) -> None:
        """results.csv anew with the header of COLUMNS (cells of columns it lacked empty), through a temporary file."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLUMNS, restval="", extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        tmp.replace(self.path)

    def _drop_torn_row(self) -> int:
        """A run killed mid-write can leave a last row without its newline: cut it off (:func:`finished_part`, the
        readers' rule); the size left."""
        data = self.path.read_bytes()
        text = data.decode("utf-8", "surrogateescape")  # a row may be cut inside a character
        size = len(finished_part(text).encode("utf-8", "surrogateescape"))
        if size < len(data):
            with self.path.open("r+b") as fh:
                fh.truncate(size)
        return size

    def write(self, judged: Judged) -> None:
        row = ResultRow.of(judged.row)
        self._csv.writerow(row.csv_cells())
        self._fh.flush()
        if judged.mask_image:
            self._masks.write(json.dumps({"backend": row["backend"], "case_id": row["case_id"], **judged.mask_image}) + "\n")
            self._masks.flush()

    def close(self) -> None:
        self._fh.close()
        self._masks.close()


#: Columns a folder may lack and --resume rebuilds from the others: ``repro`` (``lab/compact_runs.py`` leaves it
#: out of a committed run, as each row's ``case_json`` and ``backend`` give it back).
DERIVED_COLUMNS = ("repro",)


def derived_repro(row: Mapping[str, str]) -> str:
    """A row's ``repro`` from its case and backend (:meth:`Case.repro`; the run's flags, such as ``--grad``, are not
    in the row); empty for a row without its case."""
    return Case.from_json(row["case_json"]).repro(row["backend"]) if row.get("case_json") else ""


def _derive_repro(rows: list[dict[str, str]]) -> None:
    """Each row's ``repro`` rebuilt (:func:`derived_repro`)."""
    for r in rows:
        r["repro"] = derived_repro(r)
    print("parity: --resume: the rows' repro column rebuilt from case_json (without the run's flags)", file=sys.stderr)
