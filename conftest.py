"""pytest wiring: hypothesis profiles, and one parametrised test id per backend.

* ``--parity-profile quick|default|thorough`` (or ``PARITY_PROFILE``) picks the hypothesis
  settings profile; CI uses ``quick``. Failing examples are saved in ``.hypothesis/`` and
  replayed first on the next run.
* A test taking the ``backend_spec`` argument runs once per backend, with the backend's
  name in the test id (``pytest -k flex``) and its marker (``pytest -m sdpa``); GPU backends
  also carry ``gpu``. ``--backend NAME|module:Class`` (repeatable) narrows or extends the set.
  An unavailable backend is skipped with its reason, never passed.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

_DB = DirectoryBasedExampleDatabase(os.path.join(os.path.dirname(__file__), ".hypothesis", "examples"))
_COMMON = dict(database=_DB, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much], print_blob=True)
settings.register_profile("quick", max_examples=12, **_COMMON)
settings.register_profile("default", max_examples=40, **_COMMON)
settings.register_profile("thorough", max_examples=300, **_COMMON)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--parity-profile", default=None, help="hypothesis profile: quick, default, thorough ($PARITY_PROFILE)")
    parser.addoption("--backend", action="append", default=None, help="backend(s) for per-backend tests (default: all built-in)")


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("--parity-profile") or os.environ.get("PARITY_PROFILE") or "default"
    if name not in ("quick", "default", "thorough"):
        raise pytest.UsageError(f"--parity-profile must be quick, default or thorough, got {name!r}")
    os.environ["PARITY_PROFILE"] = name
    settings.load_profile(name)


def _backend_params(config: pytest.Config) -> list:
    from parity import backends
    from parity.execute import backend_info

    specs = config.getoption("--backend") or [n for n in backends.BUILTIN]
    params = []
    for spec in specs:
        try:
            info = backend_info(spec)
        except backends.BackendSpecError as exc:
            raise pytest.UsageError(str(exc)) from None
        marks = [getattr(pytest.mark, backends.marker_for(spec))]
        if info["device"] == "cuda":
            marks.append(pytest.mark.gpu)
        if info["unavailable"]:
            marks.append(pytest.mark.skip(reason=f"{spec} unavailable: {info['unavailable']}"))
        params.append(pytest.param(spec, marks=marks, id=spec))
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend_spec" in metafunc.fixturenames:
        metafunc.parametrize("backend_spec", _backend_params(metafunc.config))
