"""Bad input gets one clear line and exit code 2, never a traceback.

Invalid case specifications, unknown backends, malformed or broken plugins, bad command-line
arguments. Every call that could start a sweep carries a one-case ``--case`` and a
temporary ``--out``, so a missing check fails fast here instead of running a sweep.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from parity.cli import main

ROOT = Path(__file__).resolve().parents[1]
GOOD = {"q_lens": [6], "k_lens": [6], "hq": 2, "hkv": 1, "head_dim": 8, "dtype": "float32", "window": {"left": 2, "right": 0}}


def case(**changes) -> str:
    c = {**GOOD, **changes}
    return json.dumps({k: v for k, v in c.items() if v is not ...})


def window(**w) -> str:
    return case(window=w)


PLUGINS = {
    "plug_import_raises.py": 'raise RuntimeError("plugin import blew up")\n',
    "plug_syntax.py": "def broken(:\n",
    "plug_missing_dep.py": "import no_such_dependency_xyz\n",
    "plug_misc.py": (
        "class NeedsArgs:\n    def __init__(self, x):\n        pass\n"
        "class CtorRaises:\n    def __init__(self):\n        raise RuntimeError('ctor failed')\n"
        "NOT_CALLABLE = 3\n"
        "def returns_int():\n    return 5\n"
    ),
}


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    d = tmp_path / "plugins"
    d.mkdir()
    for name, text in PLUGINS.items():
        (d / name).write_text(text)
    monkeypatch.syspath_prepend(str(d))
    return d


def run_main(args, tmp_path, capsys, with_case=True):
    argv = list(args)
    if with_case and argv and argv[0] == "run":
        if "--case" not in argv and "--case-file" not in argv and "--profile" not in argv:
            argv += ["--case", case()]
        argv += ["--out", str(tmp_path / "out"), "-q", "--no-report"]
    rc = main(argv)
    err = capsys.readouterr().err
    return rc, err


def _assert_usage(rc, err, needle):
    assert rc == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("parity: error:")]
    assert len(lines) == 1, err  # one clear message
    assert needle in lines[0], lines[0]


# -- invalid case specifications ---------------------------------------------------------------------------

CASE_ERRORS = [
    (case(q_lens=[]), "at least one sequence"),
    (case(q_lens=[0], k_lens=[6]), "entries must be ints >= 1"),
    (case(q_lens=[3], k_lens=[3, 4]), "one entry per sequence"),
    (case(q_lens="6"), "must be a list of ints"),
    (case(q_lens=[2.5]), "entries must be ints >= 1"),
    (case(hq=3, hkv=2), "divisible"),
    (case(hq=0), "Case.hq must be >= 1"),
    (case(head_dim=True), "Case.head_dim must be an int"),
    (case(seed=-1), "Case.seed must be >= 0"),
    (case(dtype="int8"), "Case.dtype must be one of"),
    (case(scale=0), "Case.scale must be a finite number > 0"),
    (case(softcap=-1.0), "Case.softcap must be a finite number > 0"),
    (case(page_size=0), "Case.page_size must be >= 1"),
    (case(foo=1), "unknown field(s) ['foo']"),
    (case(hq=...), "missing required field(s) ['hq']"),
    (window(left=-1, right=0), "-1 is flash-attn 2's sentinel"),
    (window(left=2, right=-3), "Window.right must be >= 0"),
    (window(left=2, right=0, align="middle"), "Window.align must be one of"),
    (window(size=4), "window has unknown field(s) ['size']"),
    (window(left="4"), "Window.left must be a non-negative int or None"),
    (case(window="sliding"), "window must be an object"),
    ('{"q_lens": [6], "k_lens": [6], "hq": 2, "hkv": 1, "head_dim": 8, "scale": NaN}', "finite number > 0"),
    ("{bad json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
]


@pytest.mark.parametrize("text,needle", CASE_ERRORS, ids=[n for _, n in CASE_ERRORS])
def test_invalid_case_is_a_usage_error(text, needle, tmp_path, capsys):
    _assert_usage(*run_main(["run", "--backend", "reference", "--case", text], tmp_path, capsys), needle)


def test_invalid_case_in_a_case_file_names_the_line(tmp_path, capsys):
    f = tmp_path / "cases.jsonl"
    f.write_text(case() + "\n\n" + case(hq=3, hkv=2) + "\n")
    _assert_usage(*run_main(["run", "--backend", "reference", "--case-file", str(f)], tmp_path, capsys), "cases.jsonl:3: ")


def test_empty_case_file_is_a_usage_error(tmp_path, capsys):
    f = tmp_path / "cases.jsonl"
    f.write_text("\n")
    _assert_usage(*run_main(["run", "--backend", "reference", "--case-file", str(f)], tmp_path, capsys), "no case selected")


# -- unknown backends, malformed and broken plugins --------------------------------------------------------

BACKEND_ERRORS = [
    ("nosuch", "unknown backend 'nosuch'"),
    ("sdpa-cud", "did you mean"),
    ("a:b:c", "must look like 'package.module:ClassName'"),
    (":X", "must look like 'package.module:ClassName'"),
    ("plug_misc:", "must look like 'package.module:ClassName'"),
    ("plug_misc:1bad", "must look like 'package.module:ClassName'"),
    ("no_such_module_xyz:X", "module 'no_such_module_xyz' not found"),
    ("plug_misc:Nope", "has no attribute 'Nope'"),
    ("plug_misc:NOT_CALLABLE", "neither a Backend subclass nor a factory"),
    ("plug_misc:returns_int", "does not implement the Backend interface"),
    ("plug_misc:NeedsArgs", "constructing it raised TypeError"),
    ("plug_misc:CtorRaises", "constructing it raised RuntimeError: ctor failed"),
    ("plug_import_raises:X", "importing plug_import_raises failed: RuntimeError: plugin import blew up"),
    ("plug_syntax:X", "importing plug_syntax failed: SyntaxError"),
    ("plug_missing_dep:X", "module 'no_such_dependency_xyz' not found"),
    ("", "names no backend"),
    (",,", "names no backend"),
]


@pytest.mark.parametrize("spec,needle", BACKEND_ERRORS, ids=[s or "empty" for s, _ in BACKEND_ERRORS])
def test_bad_backend_is_a_usage_error(spec, needle, plugins, tmp_path, capsys):
    _assert_usage(*run_main(["run", "--backend", spec], tmp_path, capsys), needle)


def test_broken_plugin_from_the_shell_prints_one_line(plugins, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugins), str(ROOT)])}
    p = subprocess.run(
        [sys.executable, "-m", "parity", "run", "--backend", "plug_import_raises:X", "--case", case(), "--out", str(tmp_path / "o")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        "parity: error: backend 'plug_import_raises:X': importing plug_import_raises failed: RuntimeError: plugin import blew up"
    )
    assert not (tmp_path / "o" / "results.csv").exists()


# -- bad command-line arguments ----------------------------------------------------------------------------

ARG_ERRORS = [
    (["run", "--seed", "abc"], "invalid int value: 'abc'"),
    (["run", "--timeout", "0"], "--timeout must be > 0 seconds, got 0"),
    (["run", "--timeout", "-5"], "--timeout must be > 0 seconds, got -5"),
    (["run", "--repeats", "0"], "--repeats must be >= 1, got 0"),
    (["run", "--max-mask-passes", "0"], "--max-mask-passes must be >= 1, got 0"),
    (["run", "--jobs", "0"], "--jobs must be >= 1, got 0"),
    (["run", "--time-limit", "0"], "--time-limit must be > 0 seconds, got 0"),
    (["run", "--shrink", "-1"], "--shrink must be >= 0 calls (0: off), got -1"),
    (["run", "--time-limit", "nan"], "--time-limit must be > 0 seconds, got nan"),
    (["run", "--timeout", "nan"], "--timeout must be > 0 seconds, got nan"),
    (["run", "--compile-grace", "nan"], "--compile-grace must be >= 0 seconds, got nan"),
    (["diff", "A", "B", "--ratio-threshold", "nan"], "--ratio-threshold must be >= 1 and --min-ratio-delta >= 0, got nan and 0"),
    (["vdiff", "A", "B", "--factor", "nan"], "--factor must be > 1, --ratio-threshold >= 1 and --min-ratio-delta >= 0, got nan"),
    (["run", "--dtype", "int8"], "invalid choice: 'int8'"),
    (["run", "--profile", "huge"], "invalid choice: 'huge'"),
    (["run", "--budget", "bfloat16.k_max"], "DTYPE.FIELD=VALUE"),
    (["run", "--budget", "float32.k_max=abc"], "is not a number"),
    (["run", "--budget", "float32.k_max=-1"], "finite number >= 0"),
    (["run", "--budget", "float32.k_max=inf"], "finite number >= 0"),
    (["run", "--budget", "int8.k_max=1"], "unknown dtype 'int8'"),
    (["run", "--budget", "float32.bogus=1"], "unknown field 'bogus'"),
    (["run", "--worker-path", "nopath"], "--worker-path 'nopath': wants BACKEND=PATH"),
    (["run", "--case-file", "/no/such/file.jsonl"], "no such file"),
    (["run", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["selftest", "--bug", "nope"], "unknown planted bug 'nope'"),
    (["selftest", "--honest", "nope"], "unknown honest variant 'nope'"),
    (["selftest", "--honest-seeds", "x"], "--seeds wants N, A-B"),
    (["selftest", "--honest-seeds", "5-2"], "--seeds wants N, A-B"),
    (["selftest", "--seed", "-1"], "--seed must be >= 0"),
    (["selftest", "--profile", "huge"], "invalid choice: 'huge'"),
]


@pytest.mark.parametrize("args,needle", ARG_ERRORS, ids=[" ".join(a) for a, _ in ARG_ERRORS])
def test_bad_argument_is_a_usage_error(args, needle, tmp_path, capsys):
    _assert_usage(*run_main(args, tmp_path, capsys), needle)


def test_a_malformed_worker_path_says_what_it_wants_once(tmp_path, capsys, monkeypatch):
    """One statement of the form, naming where the item came from (was "--worker-path wants BACKEND=PATH[:PATH] (also
    in $PARITY_WORKER_PATH): worker path wants BACKEND=PATH[:PATH], got 'nopath'")."""
    monkeypatch.delenv("PARITY_WORKER_PATH", raising=False)
    rc, err = run_main(["run", "--backend", "reference", "--worker-path", "nopath"], tmp_path, capsys)
    _assert_usage(rc, err, "--worker-path 'nopath': wants BACKEND=PATH")
    assert err.count("BACKEND=PATH") == 1, err
    monkeypatch.setenv("PARITY_WORKER_PATH", "reference=/a nopath")
    rc, err = run_main(["run", "--backend", "reference"], tmp_path, capsys)
    _assert_usage(rc, err, "$PARITY_WORKER_PATH item 'nopath': wants BACKEND=PATH")
    assert err.count("BACKEND=PATH") == 1, err


def test_a_worker_path_flag_naming_no_backend_or_a_missing_folder_is_a_usage_error(tmp_path, capsys, monkeypatch):
    """Both were taken silently: the run went on without the folder the user meant to give its worker. A flag of a
    real backend outside the run is passed over with a note (a script's one list for several runs, as
    lab/device/h200_seed_systems.sh passes every staged folder)."""
    monkeypatch.delenv("PARITY_WORKER_PATH", raising=False)
    base = ["run", "--backend", "reference,sdpa", "--list-cases"]
    rc, err = run_main([*base, "--worker-path", f"fa4-cuda-typo={tmp_path}"], tmp_path, capsys)
    _assert_usage(rc, err, "--worker-path fa4-cuda-typo=...: 'fa4-cuda-typo' is not a backend")
    rc, err = run_main([*base, "--worker-path", f"fa4-cuda={tmp_path / 'nowhere'}"], tmp_path, capsys)
    assert rc == 0 and "--worker-path fa4-cuda=...: no backend of this run is fa4-cuda or a variant of it: passed over" in err, err
    rc, err = run_main([*base, "--worker-path", f"sdpa={tmp_path}:{tmp_path / 'nowhere'}"], tmp_path, capsys)
    _assert_usage(rc, err, f"--worker-path sdpa=...: '{tmp_path / 'nowhere'}' does not exist")
    # the control: a backend of the run, and a variant's base (vllm-fa3-cuda for vllm-fa3-split2-cuda), with a folder
    rc, err = run_main([*base, "--worker-path", f"sdpa={tmp_path}"], tmp_path, capsys)
    assert rc == 0, err
    variant = ["run", "--backend", "vllm-fa3-split2-cuda", "--list-cases", "--worker-path", f"vllm-fa3-cuda={tmp_path}"]
    rc, err = run_main(variant, tmp_path, capsys)
    assert rc == 0, err


def test_the_worker_path_variable_stays_lenient(tmp_path, capsys, monkeypatch):
    """$PARITY_WORKER_PATH is one list for many runs and machines (lab/loan/h200_env.sh): an entry for a backend not in
    the run is passed over in silence, a missing folder of the run's backend gets a note, and the run goes on."""
    monkeypatch.setenv("PARITY_WORKER_PATH", f"fa4-cuda=/no/fa4 sdpa={tmp_path / 'gone'}")
    rc, err = run_main(["run", "--backend", "sdpa", "--list-cases"], tmp_path, capsys)
    assert rc == 0, err
    assert f"parity: note: $PARITY_WORKER_PATH sdpa=...: {tmp_path / 'gone'} does not exist here" in err, err
    assert "/no/fa4" not in err and "error" not in err, err


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "Traceback" not in err


def test_reference_device_cuda_without_cuda(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: --reference-device cuda is valid here")
    _assert_usage(*run_main(["run", "--backend", "reference", "--reference-device", "cuda"], tmp_path, capsys), "no CUDA device here")


def test_bad_profile_in_environment(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PARITY_PROFILE", "bogus")
    rc = main(["run", "--backend", "reference", "--list-cases"])
    _assert_usage(rc, capsys.readouterr().err, "unknown profile 'bogus'")


def test_out_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "a-file"
    f.write_text("x")
    rc = main(["run", "--backend", "reference", "--case", case(), "--out", str(f), "-q", "--no-report"])
    _assert_usage(rc, capsys.readouterr().err, "cannot use it as the output folder")


def test_resume_into_a_foreign_csv(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.csv").write_text("foo,bar\n1,2\n")
    rc = main(["run", "--backend", "reference", "--case", case(), "--out", str(out), "--resume", "-q", "--no-report"])
    _assert_usage(rc, capsys.readouterr().err, "is not a results.csv of this tool")
    assert (out / "results.csv").read_text() == "foo,bar\n1,2\n"  # left alone


def test_good_input_still_runs(tmp_path, capsys):
    """The control: the same base arguments without the fault pass (so the errors above are the faults')."""
    rc, err = run_main(["run", "--backend", "reference"], tmp_path, capsys)
    assert rc == 0, err


def test_a_closed_pipe_is_not_a_traceback():
    """`parity run --list-cases | head`: the reader leaves early; exit 0, nothing on stderr (was a
    BrokenPipeError traceback, exit 1)."""
    import subprocess
    import sys

    p = subprocess.Popen(
        [sys.executable, "-m", "parity", "run", "--list-cases", "--profile", "quick"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert p.stdout is not None and p.stdout.readline()
    p.stdout.close()  # like `head -1`
    err = p.stderr.read().decode() if p.stderr else ""
    assert p.wait(timeout=120) == 0 and "Traceback" not in err, err


# -- broken run folders ------------------------------------------------------------------------------------

KNOWN_RUN = ROOT / "tests" / "fixtures" / "known-runs" / "cpu-grad-2026-12-05__seed0"


def _broken_environment(tmp_path, text: str) -> Path:
    import shutil

    run = shutil.copytree(KNOWN_RUN, tmp_path / "run")
    (run / "environment.json").write_text(text)
    return run


@pytest.mark.parametrize("command", ["report", "diff", "evidence"])
@pytest.mark.parametrize("text,kind", [("[1, 2]", "list"), ('"hello"', "str")])
def test_environment_json_that_is_not_an_object(command, text, kind, tmp_path, capsys):
    """Valid JSON but not an object (was AttributeError: 'list' object has no attribute 'get')."""
    run, out = _broken_environment(tmp_path, text), str(tmp_path / "o")
    argv = {
        "report": ["report", str(run), "--out", out],
        "diff": ["diff", str(KNOWN_RUN), str(run), "--out", out],
        "evidence": ["evidence", str(run), "--out", out],
    }[command]
    _assert_usage(main(argv), capsys.readouterr().err, f"environment.json: expected a JSON object, got {kind}")


def test_merge_skips_an_environment_json_that_is_not_an_object(tmp_path, capsys):
    """As it skips one that is not JSON: the first good folder's environment is the merged one."""
    run = _broken_environment(tmp_path, "[1, 2]")
    assert main(["merge", str(tmp_path / "o"), str(run), str(KNOWN_RUN), "--no-report"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert isinstance(json.loads((tmp_path / "o" / "environment.json").read_text()), dict)


@pytest.mark.parametrize("field,value,kind", [("backends", 5, "an object"), ("gpu", "x", "an object"), ("earlier_runs", "x", "an array")])
def test_environment_json_field_of_the_wrong_type(field, value, kind, tmp_path, capsys):
    """A field the report takes apart, of the wrong JSON type (was AttributeError: 'int' object has no attribute 'items')."""
    env = json.loads((KNOWN_RUN / "environment.json").read_text())
    run = _broken_environment(tmp_path, json.dumps({**env, field: value}))
    rc = main(["report", str(run), "--out", str(tmp_path / "o")])
    _assert_usage(rc, capsys.readouterr().err, f"environment.json: field {field!r} must be {kind} or null")


@pytest.mark.parametrize("timing", [{"lanes": 5}, {"all_calls": 3, "stages": [1]}, {"wall_s": "long"}, [1, 2]])
def test_timing_json_of_the_wrong_shape_is_read_as_none(timing, tmp_path, capsys):
    """timing.json is the reports' extra (absent or torn: none); one of the wrong shape is the same, not a
    TypeError in the report (was: object of type 'int' has no len())."""
    from parity.runfolder import read_timing

    run = _broken_environment(tmp_path, (KNOWN_RUN / "environment.json").read_text())
    (run / "timing.json").write_text(json.dumps(timing))
    assert read_timing(run) == {}
    assert main(["report", str(run), "--out", str(tmp_path / "o")]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "text,needle",
    [
        ("a,b\n1,2\n", "a .csv case file is a results.csv (a case_json column); this has none"),
        ('backend,case_json\nsdpa,"{not json"\n', "cases.csv, row 1: case is not valid JSON"),
    ],
)
def test_bad_results_csv_as_case_file(text, needle, tmp_path, capsys):
    """A .csv --case-file names itself and the row (was: a bare "no case selected", or a case error without the file)."""
    f = tmp_path / "cases.csv"
    f.write_text(text)
    _assert_usage(*run_main(["run", "--backend", "reference", "--case-file", str(f)], tmp_path, capsys), needle)


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--time-limit", "-1"], "--time-limit must be > 0 seconds, got -1"),
        (["--time-limit", "nan"], "--time-limit must be > 0 seconds, got nan"),
        (["--tie-factor", "0"], "--tie-factor must be > 0, got 0"),
        (["--steps", "0"], "--steps must be >= 1, got 0"),
        (["--window", "1"], "--window must be >= 2, got 1"),
        (["--page-size", "0"], "--page-size must be >= 1, got 0"),
    ],
)
def test_bad_decode_argument_names_its_value(args, needle, tmp_path, capsys):
    """Each bad decode number is named with its value (was one sentence for four flags; a negative --time-limit ran)."""
    rc = main(["decode", "--backend", "sdpa", "--device", "cpu", "--out", str(tmp_path / "o"), *args])
    _assert_usage(rc, capsys.readouterr().err, needle)


@pytest.mark.parametrize("flag,value", [("--prompt-bytes", "64"), ("--swap-from", "sdpa"), ("--prompts", "4")])
def test_a_language_model_flag_without_lm_is_a_usage_error(flag, value, tmp_path, capsys):
    """--prompt-bytes, --swap-from and --prompts act on the --lm study only; without --lm they were ignored in silence
    (the run went on with the toy models' defaults)."""
    small = ["--prompt-lens", "8", "--steps", "1", "--time-limit", "1"]  # a short study where the flag is not refused
    rc = main(["decode", "--backend", "sdpa", "--device", "cpu", "--out", str(tmp_path / "o"), *small, flag, value])
    _assert_usage(rc, capsys.readouterr().err, f"{flag} applies to the language-model study only: add --lm")
    assert not (tmp_path / "o").exists()  # refused before any work


@pytest.mark.parametrize(
    "flag,value",
    [("--model", "mistral"), ("--hf-checkpoint", "."), ("--prompt-lens", "8"), ("--window", "16"), ("--page-size", "4")],
)
def test_a_toy_model_flag_with_lm_is_a_usage_error(flag, value, tmp_path, capsys):
    """--model, --hf-checkpoint, --prompt-lens, --window and --page-size act on the toy models only; with --lm they
    were ignored in silence. Given, --window 16 is refused too; left at its default, nothing is."""
    lm = ["decode", "--lm", str(tmp_path / "no-model"), "--backend", "sdpa", "--device", "cpu", "--out", str(tmp_path / "o")]
    rc = main([*lm, flag, value])
    _assert_usage(rc, capsys.readouterr().err, f"{flag} applies to the toy-model study only, not to --lm: drop {flag}")
    assert not (tmp_path / "o").exists()  # refused before any work
    rc = main(lm)  # the control: no toy flag given, the study goes on to its model (here none)
    err = capsys.readouterr().err
    assert rc == 2 and "toy-model study" not in err and "no-model" in err, err


def test_consistency_out_that_is_a_file(tmp_path, capsys):
    """Refused before the checks run (was FileExistsError after them)."""
    f = tmp_path / "a-file"
    f.write_text("x")
    rc = main(["consistency", "--backend", "sdpa", "--seq", "8", "--out", str(f)])
    _assert_usage(rc, capsys.readouterr().err, "--out " + str(f) + ": not a folder")
    assert f.read_text() == "x"


def test_append_consistency_names_a_folder_it_cannot_write(tmp_path):
    from parity.errors import UserError
    from parity.runfolder import append_consistency

    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match="cannot write .*consistency.csv"):
        append_consistency(tmp_path / "f" / "sub", ["a"], [{"a": 1}])


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["decode", "--backend", "sdpa", "--device", "cpu", "--out", "{file}"], "not a folder (give the folder for the decode results)"),
        (["decode-train", "--steps", "1", "--out", "{file}"], "not a folder (give the folder for the model)"),
        (["decode-train", "--steps", "1", "--device", "nope", "--out", "{dir}"], "--device 'nope': not a device"),
    ],
)
def test_decode_out_and_device(argv, needle, tmp_path, capsys):
    """An --out that is a file, a --device torch does not know (were FileExistsError / RuntimeError tracebacks)."""
    f = tmp_path / "a-file"
    f.write_text("x")
    rc = main([a.format(file=f, dir=tmp_path / "model") for a in argv])
    _assert_usage(rc, capsys.readouterr().err, needle)
    assert f.read_text() == "x" and not (tmp_path / "model").exists()


def test_resume_with_another_profile_says_the_rows_mix(tmp_path, capsys):
    """``--resume --profile quick`` on a folder started with ``--profile first``: flags given win (the README), but
    the folder's rows of the first profile stay beside the new ones; a note says so (it was silent)."""
    from parity.cli import build_parser, common
    from parity.cli import run as run_command

    (tmp_path / "environment.json").write_text(json.dumps({"argv": ["parity", "run", "--profile", "first", "--quiet"]}))
    args = build_parser().parse_args(["run", "--resume", "--out", str(tmp_path), "--profile", "quick", "--no-report"])
    assert common.resumed(args, run_command.add_parser).profile == "quick"
    err = capsys.readouterr().err
    assert "parity: --resume: --profile given now differ from `parity run --profile first --quiet`" in err, err
    assert "--no-report" not in err.split("differ")[0]  # how the run reports is not its case set
