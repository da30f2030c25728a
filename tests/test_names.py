"""Names that say what they hold: a backend name is ``backend`` / ``backend_name(s)``, never ``spec`` (issue 51)."""

from __future__ import annotations

import ast
from pathlib import Path

import parity

PARITY = Path(parity.__file__).parent
SPEC_NAMES = ("spec", "specs")

#: (module, function) -> why its ``spec`` / ``specs`` parameter is not a backend name.
NOT_A_BACKEND = {
    ("decode/train.py", "lr_at"): "a TrainSpec, the training preset",
    ("decode/train.py", "_heldout_starts"): "a TrainSpec",
    ("decode/train.py", "evaluate"): "a TrainSpec",
    ("decode/train.py", "step_cap"): "a TrainSpec",
    ("decode/train.py", "_train_loop"): "a TrainSpec",
    ("decode/train.py", "train"): "a TrainSpec",
    ("decode/train.py", "_train"): "a TrainSpec",
    ("expect.py", "load"): "--expect values (files, 'default', 'none')",
    ("expect.py", "load_checked"): "--expect values",
    ("maskcheck.py", "_image"): "the mask the window specifies, a tensor",
    ("models.py", "resolve"): "a --model value (table name or config.json path)",
    ("models.py", "profile_cases"): "--model values",
    ("results.py", "__format__"): "a format spec (Python's own name)",
}


def spec_parameters(source: str, module: str) -> list[tuple[str, str, int]]:
    """``(module, function, line)`` of every function parameter named ``spec`` / ``specs`` in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
            if any(p.arg in SPEC_NAMES for p in params):
                found.append((module, getattr(node, "name", "<lambda>"), node.lineno))
    return found


def _all_spec_parameters() -> list[tuple[str, str, int]]:
    found = []
    for path in sorted(PARITY.rglob("*.py")):
        found += spec_parameters(path.read_text(), path.relative_to(PARITY).as_posix())
    return found


def test_no_parameter_named_spec_holds_a_backend_name():
    bad = [f"parity/{m}:{line} {fn}()" for m, fn, line in _all_spec_parameters() if (m, fn) not in NOT_A_BACKEND]
    assert not bad, "parameters named spec/specs (a backend name is `backend` / `backend_name(s)`): " + ", ".join(bad)


def test_every_allowed_spec_parameter_still_exists():
    seen = {(m, fn) for m, fn, _ in _all_spec_parameters()}
    assert not set(NOT_A_BACKEND) - seen, f"stale NOT_A_BACKEND entries: {sorted(set(NOT_A_BACKEND) - seen)}"


def test_the_scan_finds_a_backend_spec_parameter():
    planted = "def run(spec: str):\n    pass\n\nclass A:\n    def m(self, *, specs=()):\n        f = lambda spec: spec\n"
    assert spec_parameters(planted, "x.py") == [("x.py", "run", 1), ("x.py", "m", 5), ("x.py", "<lambda>", 6)]
    assert spec_parameters("def run(backend: str, window_spec=None):\n    spec = 1\n", "x.py") == []
