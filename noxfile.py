"""nox sessions: tests (CPU), parity (the sweep), gpu (current environment), lint.

CPU sessions install the CPU build of torch pinned by ``PARITY_TORCH`` (default
``torch==2.13.0``); the ``gpu`` session runs in the current environment, for runners
that bring their own CUDA torch and GPU packages.
"""

import os

import nox

nox.options.sessions = ["tests", "lint"]
TORCH = os.environ.get("PARITY_TORCH", "torch==2.13.0")


@nox.session
def tests(session: nox.Session) -> None:
    session.install(TORCH)
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", "--parity-profile", os.environ.get("PARITY_PROFILE", "quick"), *session.posargs)


@nox.session
def parity(session: nox.Session) -> None:
    session.install(TORCH)
    session.install("-e", ".[report]")
    session.run("python", "-m", "parity", "run", *(session.posargs or ["--profile", "quick"]))


@nox.session(venv_backend="none")
def gpu(session: nox.Session) -> None:
    """Every available backend, GPU ones included, in this environment (not a default session)."""
    session.run("python", "-m", "parity", "backends")
    profile = os.environ.get("PARITY_PROFILE", "default")
    session.run("python", "-m", "pytest", "-m", "gpu", "--parity-profile", profile, success_codes=[0, 5])
    # lanes: compile-bound backends (flex, FA4, JAX XLA) run beside the rest instead of holding them up
    jobs = os.environ.get("PARITY_GPU_JOBS", "4")
    # compiled kernels kept across runs (flex, FA4, JAX): save/restore this folder between CI jobs
    cache = os.environ.get("PARITY_COMPILE_CACHE", ".cache/parity-compile")
    session.run("python", "-m", "parity", "run", "--backend", os.environ.get("PARITY_GPU_BACKENDS", "all-gpu"),
                "--jobs", jobs, "--compile-cache", cache, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install(TORCH)
    session.install("-e", ".[lint]")
    session.run("ruff", "check", "parity", "tests", "examples", "noxfile.py", "conftest.py")
    session.run("mypy", "parity")
