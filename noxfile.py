"""nox sessions: tests (CPU, the fast suite), slow (the tests marked slow), parity (the sweep), gpu (current environment), lint.

CPU sessions install the CPU build of torch pinned by ``PARITY_TORCH`` (default
``torch==2.13.0``); the ``gpu`` session runs in the current environment, for runners
that bring their own CUDA torch and GPU packages.
"""

import os
import shlex
import sys

import nox

nox.options.sessions = ["tests", "slow", "lint"]
TORCH = os.environ.get("PARITY_TORCH", "torch==2.13.0")


@nox.session
def tests(session: nox.Session) -> None:
    session.install(TORCH)
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "--parity-profile", os.environ.get("PARITY_PROFILE", "quick"), "-n", "auto", *session.posargs)


@nox.session
def slow(session: nox.Session) -> None:
    """The tests marked ``slow`` that the default run leaves out (the self-test's sweeps), one at a time:
    each starts a sweep with lanes of its own, so ``-n 2`` on 2 CPUs took 643 s against 183 s serially."""
    session.install(TORCH)
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "-m", "slow", "--parity-profile", os.environ.get("PARITY_PROFILE", "quick"), *session.posargs)


@nox.session
def parity(session: nox.Session) -> None:
    session.install(TORCH)
    session.install("-e", ".[report]")
    session.run("python", "-m", "parity", "run", *(session.posargs or ["--profile", "quick"]))


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """Every available backend, GPU ones included, in this environment (not a default session).

    ``PARITY_PROFILE`` (default ``default``) sizes both steps; ``PARITY_GPU_BACKENDS`` (default
    ``all-gpu``) names the backends of both: a list of names / ``module:Class`` narrows the pytest
    step to them too (how a planted bug is plugged in); ``PARITY_WORKER_PATH`` (``BACKEND=PATH``
    items) runs packages that cannot share one sys.path in worker processes, in both steps;
    ``PARITY_PYTEST_ARGS`` adds arguments to the pytest step (``-n 4`` with pytest-xdist).
    Both steps run with this interpreter (``sys.executable``): the runner's own environment.
    """
    python = sys.executable
    session.run(python, "-m", "parity", "backends")
    profile = os.environ.get("PARITY_PROFILE", "default")
    # known divergences (parity/known_divergences.toml, or $PARITY_EXPECT): expected rows are xfails in
    # pytest and exit 0 in `parity run`; a strict entry's unexpected pass fails both
    expect = [a for f in os.environ.get("PARITY_EXPECT", "default").split(os.pathsep) if f for a in ("--expect", f)]
    backends = os.environ.get("PARITY_GPU_BACKENDS", "all-gpu")
    named = [b for b in backends.split(",") if b and b not in ("all", "all-gpu", "all-cpu")]
    # compiled kernels kept across runs (flex, FA4, JAX): save/restore this folder between CI jobs; the
    # pytest step compiles into it too, so the sweep after it starts warm
    cache = os.environ.get("PARITY_COMPILE_CACHE", ".cache/parity-compile")
    from parity import compile_cache

    root = compile_cache.resolve(cache)
    assert root is not None
    compile_cache.enable(root)  # in this process's environment: both steps inherit it
    session.run(
        python,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "--parity-profile",
        profile,
        *expect,
        *(a for b in named for a in ("--backend", b)),
        *shlex.split(os.environ.get("PARITY_PYTEST_ARGS", "")),
        success_codes=[0, 5],
    )
    # lanes: compile-bound backends (flex, FA4, JAX XLA, FlashInfer) run beside the rest instead of holding them up,
    # split over several lanes where their cost (measured into the cache by earlier runs, else their hints) says so
    jobs = os.environ.get("PARITY_GPU_JOBS", "4")
    lanes = ["--jobs", jobs, "--split", "auto"]
    session.run(python, "-m", "parity", "run", "--backend", backends, *lanes, "--compile-cache", cache, *expect, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install(TORCH)
    session.install("-e", ".[lint]")
    session.run("ruff", "check", "parity", "tests", "lab", "examples", "benchmarks", "noxfile.py", "conftest.py")
    session.run("ruff", "format", "--check", "parity", "tests", "lab", "examples", "benchmarks", "noxfile.py", "conftest.py")
    session.run("mypy", "parity")
