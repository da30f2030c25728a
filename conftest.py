"""pytest wiring: hypothesis profiles, and one parametrised test id per backend.

* ``--parity-profile quick|default|thorough`` (or ``PARITY_PROFILE``) picks the hypothesis
  settings profile; CI uses ``quick``. Failing examples are saved in ``.hypothesis/`` and
  replayed first on the next run.
* A test taking the ``backend_spec`` argument runs once per backend, with the backend's
  name in the test id (``pytest -k flex``) and its marker (``pytest -m sdpa``); GPU backends
  also carry ``gpu``. ``--backend NAME|module:Class`` (repeatable) narrows or extends the set.
  An unavailable backend is skipped with its reason, never passed.
* ``--parity-shard K/N`` keeps shard K of N of the collected tests (sha256 of the node id mod N,
  as pytest-shard: an item's shard does not depend on the other items), for CI matrices.
* ``--expect FILE`` (repeatable; ``default``, ``none``) or ``PARITY_EXPECT`` picks the known
  divergences (:mod:`parity.expect`; default ``parity/known_divergences.toml``), the
  ``expectations`` fixture: a failing row one describes is an xfail (example tests) or an
  expected example (property tests); a strict entry's unexpected pass fails the test.
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
_EXPECT = pytest.StashKey[object]()  # parity.expect.Expectations of the session
_PATHS = pytest.StashKey[dict]()  # {backend: [folders]}: backends evaluated in a worker process


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--parity-profile", default=None, help="hypothesis profile: quick, default, thorough ($PARITY_PROFILE)")
    parser.addoption("--backend", action="append", default=None, help="backend(s) for per-backend tests (default: all built-in)")
    parser.addoption("--worker-path", action="append", default=None, metavar="BACKEND=PATH",
                     help="run BACKEND in a worker process with PATH first on its sys.path (repeatable; "
                          "also $PARITY_WORKER_PATH, items separated by spaces or ';'), as `parity run --worker-path`")
    parser.addoption("--expect", action="append", default=None, metavar="FILE",
                     help="known divergences TOML (repeatable; 'default', 'none'; default: $PARITY_EXPECT, else the packaged file)")
    parser.addoption("--parity-shard", default=None, metavar="K/N",
                     help="run only shard K of N of the collected tests (by node id, as pytest-shard; parity.shard)")


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("--parity-profile") or os.environ.get("PARITY_PROFILE") or "default"
    if name not in ("quick", "default", "thorough"):
        raise pytest.UsageError(f"--parity-profile must be quick, default or thorough, got {name!r}")
    os.environ["PARITY_PROFILE"] = name
    if config.getoption("--parity-shard"):
        from parity.shard import parse_shard

        try:
            parse_shard(config.getoption("--parity-shard"))
        except ValueError as exc:
            raise pytest.UsageError(f"--parity-shard: {exc}") from None
    settings.load_profile(name)
    from parity.expect import ExpectationError, load

    try:  # a bad file is a usage error at start-up, not an error in every test
        config.stash[_EXPECT] = load(config.getoption("--expect"))
    except ExpectationError as exc:
        raise pytest.UsageError(str(exc)) from None
    from parity.execute import env_worker_paths, parse_worker_paths

    try:
        config.stash[_PATHS] = parse_worker_paths([*env_worker_paths(), *(config.getoption("--worker-path") or [])])
    except ValueError as exc:
        raise pytest.UsageError(f"--worker-path: {exc}") from None


@pytest.fixture(scope="session")
def expectations(pytestconfig: pytest.Config):
    """The known divergences of this session (``--expect`` / ``PARITY_EXPECT`` / the default file)."""
    return pytestconfig.stash[_EXPECT]


@pytest.fixture(scope="session")
def worker_paths(pytestconfig: pytest.Config) -> dict:
    """``{backend: [folders]}`` from ``--worker-path`` / ``PARITY_WORKER_PATH``: pass
    ``worker_path=worker_paths.get(spec)`` to :func:`parity.evaluate`."""
    return pytestconfig.stash[_PATHS]


def _backend_params(config: pytest.Config) -> list:
    from parity import backends
    from parity.api import worker_info
    from parity.execute import backend_info

    specs = config.getoption("--backend") or [n for n in backends.BUILTIN]
    params = []
    for spec in specs:
        try:
            path = config.stash[_PATHS].get(spec)
            info = worker_info(spec, path) if path else backend_info(spec)
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


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """``--parity-shard K/N``: keep the items of shard K (sha256 of the node id mod N)."""
    spec = config.getoption("--parity-shard")
    if not spec:
        return
    from parity.shard import keep_nodeids, parse_shard

    k, n = parse_shard(spec)
    keep = keep_nodeids([i.nodeid for i in items], k, n)
    dropped = [i for i in items if i.nodeid not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i.nodeid in keep]
