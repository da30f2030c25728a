"""attn-parity's pytest plugin: test your own kernel in your own repository.

Registered through the ``pytest11`` entry point, so pytest loads it wherever attn-parity is
installed; it stays inert until used (importing it imports neither torch nor hypothesis).

Options (also ``[tool.pytest.ini_options] parity_backends = [...]`` for the backends):

* ``--parity-backend NAME|module:Class`` (repeatable): the backends the ``parity_backend``
  parametrisation runs (a built-in name, an ``attn_parity.backends`` entry point, or your
  class as ``package.module:Class``);
* ``--parity-profile quick|default|thorough`` (or ``$PARITY_PROFILE``): how many cases
  ``parity_case`` runs (the sweep's: every edge case, the profile's covering design, the
  profile's hypothesis-drawn cases) and the hypothesis settings profile of ``@given`` tests;
* ``--parity-expect FILE`` (repeatable; ``default``, ``none``; or ``$PARITY_EXPECT``): known
  divergences (:mod:`parity.expect`): a failure one describes is an xfail naming it;
* ``--parity-worker-path BACKEND=PATH`` (repeatable; or ``$PARITY_WORKER_PATH``): run BACKEND
  in a worker process with PATH first on its sys.path (and its variants, ``vllm-fa3-split2-cuda`` of
  ``vllm-fa3-cuda``, unless they have their own);
* ``--parity-shard K/N``: keep shard K of N of the collected tests (sha256 of the node id mod N,
  as pytest-shard: an item's shard does not depend on the other items), for CI matrices.

Markers: ``gpu``, ``slow``, ``backend(name)`` and one per backend family
(:data:`parity.markers.MARKERS`); each ``parity_backend`` parameter carries its family's marker
(``plugin`` for ``module:Class``) and ``gpu`` for CUDA backends; an unavailable backend is
skipped with its reason.

Fixtures:

* ``parity_backend`` / ``parity_case``: a test taking ``parity_case`` runs once per case of
  ``parity_cases`` (and, taking ``parity_backend`` too, once per backend x case);
* ``parity_cases``: the list of :class:`parity.Case` for the profile;
* ``assert_parity(backend, case)``: evaluate and judge; fails with the measured miss and a
  ``repro:`` line, skips ``unsupported`` / ``unavailable``, xfails a known divergence;
  ``--parity-grad`` (or ``assert_parity(..., grad=True)``) checks the backward too;
* ``parity_expectations``, ``parity_worker_paths``: what the options resolved to.

Example (``tests/test_parity.py`` in your repository)::

    def test_my_kernel(parity_backend, parity_case, assert_parity):
        assert_parity(parity_backend, parity_case)

    # pytest --parity-backend mypkg.kernels:MyKernel --parity-profile quick
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .markers import MARKERS
from .results import Outcome

_EXPECT = pytest.StashKey[Any]()  # parity.expect.Expectations of the session
_PATHS = pytest.StashKey[dict]()  # {backend: [folders]}
_PROFILE = pytest.StashKey[str]()  # the hypothesis profile loaded (absent: none)
_CASES = pytest.StashKey[list]()
_INFO = pytest.StashKey[dict]()  # backend name -> backend_info


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attn-parity", "attn-parity: attention backends against a float64 reference")
    group.addoption(
        "--parity-backend",
        action="append",
        default=None,
        dest="parity_backend",
        metavar="NAME|module:Class",
        help="backend for parity_backend tests (repeatable): a built-in name, an entry point, or package.module:Class",
    )
    group.addoption(
        "--parity-profile",
        default=None,
        dest="parity_profile",
        metavar="PROFILE",
        help="cases and hypothesis profile: quick, default, thorough ($PARITY_PROFILE)",
    )
    group.addoption(
        "--parity-expect",
        action="append",
        default=None,
        dest="parity_expect",
        metavar="FILE",
        help="known divergences TOML (repeatable; 'default', 'none'; default: $PARITY_EXPECT, else the packaged file)",
    )
    group.addoption(
        "--parity-worker-path",
        action="append",
        default=None,
        dest="parity_worker_path",
        metavar="BACKEND=PATH",
        help="run BACKEND in a worker process with PATH first on its sys.path (repeatable; also "
        "$PARITY_WORKER_PATH, items separated by spaces or ';'); a variant of BACKEND (vllm-fa3-split2-cuda of "
        "vllm-fa3-cuda) takes BACKEND's PATH unless it has its own",
    )
    group.addoption(
        "--parity-shard",
        default=None,
        dest="parity_shard",
        metavar="K/N",
        help="run only shard K of N of the collected tests (by node id, as pytest-shard)",
    )
    group.addoption(
        "--parity-grad",
        action="store_true",
        default=False,
        dest="parity_grad",
        help="assert_parity checks the backward too (dq, dk, dv; as parity run --grad)",
    )
    parser.addini("parity_backends", "backends for parity_backend tests when --parity-backend is not given", type="linelist", default=[])


def pytest_configure(config: pytest.Config) -> None:
    for name, words in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {words}")
    # inert unless asked: the hypothesis profile and the option files only when given
    if config.getoption("parity_profile") or os.environ.get("PARITY_PROFILE"):
        load_profile(config)
    if config.getoption("parity_expect") or os.environ.get("PARITY_EXPECT"):
        expectations(config)
    if config.getoption("parity_worker_path") or os.environ.get("PARITY_WORKER_PATH"):
        worker_paths(config)
    if config.getoption("parity_shard"):
        from .shard import parse_shard

        try:
            parse_shard(config.getoption("parity_shard"))
        except ValueError as exc:
            raise pytest.UsageError(f"--parity-shard: {exc}") from None


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """``--parity-shard K/N``: keep the items of shard K, deselect the others."""
    spec = config.getoption("parity_shard")
    if not spec:
        return
    from .shard import keep_nodeids, parse_shard

    k, n = parse_shard(spec)
    keep = keep_nodeids([i.nodeid for i in items], k, n)
    dropped = [i for i in items if i.nodeid not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i.nodeid in keep]


def load_profile(config: pytest.Config, default: str = "default") -> str:
    """Load the hypothesis profile ``--parity-profile`` / ``$PARITY_PROFILE`` / ``default`` names
    (once per session) and export it as ``$PARITY_PROFILE`` (``parity.strategies.profile``)."""
    if _PROFILE in config.stash:
        return config.stash[_PROFILE]
    name = config.getoption("parity_profile") or os.environ.get("PARITY_PROFILE") or default
    from .strategies import PROFILES  # the one profile table (imports torch and hypothesis: only when a profile is asked for)

    if name not in PROFILES:
        raise pytest.UsageError(f"--parity-profile must be one of {', '.join(PROFILES)}, got {name!r}")
    from hypothesis import HealthCheck, settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    db = DirectoryBasedExampleDatabase(str(Path(config.rootpath) / ".hypothesis" / "examples"))
    common: dict[str, Any] = dict(
        database=db, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much], print_blob=True
    )
    for prof in PROFILES.values():
        settings.register_profile(f"parity-{prof.name}", max_examples=prof.test_examples, **common)
    settings.load_profile(f"parity-{name}")
    os.environ["PARITY_PROFILE"] = name
    config.stash[_PROFILE] = name
    return name


def expectations(config: pytest.Config) -> Any:
    """The session's known divergences (``--parity-expect`` / ``$PARITY_EXPECT`` / the packaged file)."""
    if _EXPECT not in config.stash:
        from .expect import ExpectationError, load

        try:  # a bad file is a usage error at start-up, not an error in every test
            config.stash[_EXPECT] = load(config.getoption("parity_expect"))
        except ExpectationError as exc:
            raise pytest.UsageError(str(exc)) from None
    return config.stash[_EXPECT]


def worker_paths(config: pytest.Config) -> dict[str, list[str]]:
    """``{backend: [folders]}`` from ``--parity-worker-path`` / ``$PARITY_WORKER_PATH``, each registered variant with
    its base backend's folders unless it has its own (:func:`parity.backends.with_variants`)."""
    if _PATHS not in config.stash:
        from .execute import worker_paths as parse

        try:
            given = parse(config.getoption("parity_worker_path"))
        except ValueError as exc:
            raise pytest.UsageError(f"--parity-worker-path: {exc}") from None
        if given:
            from . import backends

            given = backends.with_variants(given, backends.names())
        config.stash[_PATHS] = given
    return config.stash[_PATHS]


def _worker_path(config: pytest.Config, backend: str) -> list[str] | None:
    """``backend``'s folders (a ``module:Class`` variant's too: :func:`parity.backends.worker_path`)."""
    if not worker_paths(config):
        return None
    from . import backends

    return backends.worker_path(worker_paths(config), backend)


def _info(config: pytest.Config, backend: str) -> dict[str, Any]:
    infos = config.stash.setdefault(_INFO, {})
    if backend not in infos:
        from . import backends
        from .api import worker_info
        from .execute import backend_info

        path = _worker_path(config, backend)
        try:
            infos[backend] = worker_info(backend, path) if path else backend_info(backend)
        except backends.BackendSpecError as exc:
            raise pytest.UsageError(str(exc)) from None
    return infos[backend]


def backend_params(config: pytest.Config, backend_names: list[str]) -> list[Any]:
    """One ``pytest.param`` per backend name: its id, its marker (and ``gpu``), skipped when unavailable."""
    params = []
    for backend in backend_names:
        from .markers import marker_for

        info = _info(config, backend)
        marks = [getattr(pytest.mark, marker_for(backend))]
        if info["device"] == "cuda":
            marks.append(pytest.mark.gpu)
        if info["unavailable"]:
            marks.append(pytest.mark.skip(reason=f"{backend} unavailable: {info['unavailable']}"))
        params.append(pytest.param(backend, marks=marks, id=backend))
    return params


def selected_backends(config: pytest.Config) -> list[str]:
    """``--parity-backend`` (selectors such as ``all-gpu`` expanded), else the ``parity_backends`` ini list."""
    backend_names = config.getoption("parity_backend") or list(config.getini("parity_backends"))
    if not backend_names:
        return []
    from . import backends

    return [n for s in backend_names for n in backends.expand(s)]


def cases(config: pytest.Config) -> list[Any]:
    """The profile's cases, as ``python -m parity run`` generates them (seed 0); long key ranges capped
    at the CPU cap unless a selected backend runs on CUDA."""
    if _CASES not in config.stash:
        from .strategies import CPU_LONG_CAP, generate, profile

        prof = profile(load_profile(config))
        cuda = any(_info(config, s)["device"] == "cuda" for s in selected_backends(config))
        config.stash[_CASES] = generate(prof, 0, long_len=None if cuda else min(prof.long_len, CPU_LONG_CAP))
    return config.stash[_CASES]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    names = metafunc.fixturenames
    if "parity_backend" in names:
        backend_names = selected_backends(metafunc.config)
        if backend_names:
            metafunc.parametrize("parity_backend", backend_params(metafunc.config, backend_names))
        else:
            metafunc.parametrize(
                "parity_backend",
                [
                    pytest.param(
                        None,
                        marks=pytest.mark.skip(
                            reason="no backend: give --parity-backend NAME|module:Class (or parity_backends in the ini file)"
                        ),
                        id="no-backend",
                    )
                ],
            )
    if "parity_case" in names:
        cs = cases(metafunc.config)
        metafunc.parametrize("parity_case", cs, ids=[f"{c.dtype}-{c.case_id}" for c in cs])


@pytest.fixture(scope="session")
def parity_expectations(pytestconfig: pytest.Config) -> Any:
    """The known divergences of this session."""
    return expectations(pytestconfig)


@pytest.fixture(scope="session")
def parity_worker_paths(pytestconfig: pytest.Config) -> dict[str, list[str]]:
    """``{backend: [folders]}``, variants included: pass ``worker_path=parity_worker_paths.get(backend)`` to
    :func:`parity.evaluate`."""
    return worker_paths(pytestconfig)


@pytest.fixture(scope="session")
def parity_cases(pytestconfig: pytest.Config) -> list[Any]:
    """Every case of the profile (what ``parity_case`` parametrises over)."""
    return cases(pytestconfig)


def check_row(row: dict[str, Any], expectations: Any = None, judged: Any = None) -> dict[str, Any]:
    """A judged row as a pytest outcome: ``pass`` returns it; ``unsupported`` / ``unavailable`` skip with
    the reason; ``expected`` xfails naming the known divergence; anything else fails with the measured
    miss and its ``repro:`` line (an ``unexpected-pass`` names the strict entry)."""
    from .api import ParityError, failure_message

    v = row["verdict"]
    if v == Outcome.PASS:
        return row
    if v in (Outcome.UNSUPPORTED, Outcome.UNAVAILABLE):
        pytest.skip(f"{row['backend']} {v}: {row.get('detail')}")
    words = expectations.describe_id(row.get("expected_id", "")) if expectations else str(row.get("expected_id"))  # a+b: each
    if v == Outcome.EXPECTED:
        pytest.xfail(f"{words} [{row.get('reasons') or row.get('raw_verdict')}]")
    if v == Outcome.UNEXPECTED_PASS:
        raise ParityError(
            f"{row['backend']} UNEXPECTED PASS: the strict known divergence {words} expects a failure; "
            f"retire or narrow the entry\n  repro: {row['repro']}"
        )
    raise ParityError(failure_message(judged if judged is not None else row))


@pytest.fixture
def assert_parity(pytestconfig: pytest.Config) -> Any:
    """``assert_parity(backend, case, **evaluate_kw) -> row``: :func:`parity.evaluate` with the session's
    known divergences and worker paths, turned into a pytest outcome by :func:`check_row`."""
    from .api import evaluate_record

    def check(backend: Any, case: Any, **kw: Any) -> dict[str, Any]:
        exp = kw.pop("expectations", expectations(pytestconfig))
        if isinstance(backend, str) and "worker_path" not in kw:
            kw["worker_path"] = _worker_path(pytestconfig, backend)
        kw.setdefault("grad", bool(pytestconfig.getoption("parity_grad", False)))
        judged = evaluate_record(backend, case, expectations=exp, **kw)
        return check_row(judged.row, exp, judged)

    return check
