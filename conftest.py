"""pytest wiring of this repository's own tests, on top of the attn-parity plugin
(:mod:`parity.pytest_plugin`, loaded through the ``pytest11`` entry point: ``pip install -e .``;
registered here when the entry point is not installed, as on a bare GPU runner).

The plugin brings ``--parity-profile``, ``--parity-backend``, ``--parity-expect``,
``--parity-worker-path`` and the markers. Here:

* the hypothesis profile defaults to ``default`` (the plugin loads none unless asked);
* ``--backend``, ``--expect``, ``--worker-path``: the older names of the plugin's options (same
  destinations), kept for the README's commands, noxfile.py and scripts;
* a test taking ``backend_name`` runs once per backend (default: every built-in one), with the
  backend's name in the test id (``pytest -k flex``) and its marker (``pytest -m sdpa``; GPU
  backends also ``gpu``); an unavailable backend is skipped with its reason;
* ``expectations`` / ``worker_paths``: the plugin's ``parity_expectations`` / ``parity_worker_paths``;
* ``--parity-shard K/N`` (the plugin's) keeps one shard of the collected tests.
"""

from __future__ import annotations

import pytest

from parity import pytest_plugin


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager) -> None:
    if not pluginmanager.has_plugin("attn_parity"):
        # a checkout run without `pip install -e .` (a bare GPU runner, PYTEST_DISABLE_PLUGIN_AUTOLOAD):
        # register the plugin under its entry-point name; pytest_addoption is historic, so its
        # options are added now too
        pluginmanager.register(pytest_plugin, "attn_parity")
    parser.addoption(
        "--backend",
        action="append",
        default=None,
        dest="parity_backend",
        metavar="NAME|module:Class",
        help="backend(s) for per-backend tests (default: all built-in); = --parity-backend",
    )
    parser.addoption(
        "--worker-path",
        action="append",
        default=None,
        dest="parity_worker_path",
        metavar="BACKEND=PATH",
        help="= --parity-worker-path: run BACKEND in a worker process with PATH first on its sys.path",
    )
    parser.addoption(
        "--expect",
        action="append",
        default=None,
        dest="parity_expect",
        metavar="FILE",
        help="= --parity-expect: known divergences TOML (repeatable; 'default', 'none')",
    )


def pytest_configure(config: pytest.Config) -> None:
    pytest_plugin.load_profile(config, default="default")
    pytest_plugin.expectations(config)  # a bad --expect file: a usage error at start-up
    pytest_plugin.worker_paths(config)


@pytest.fixture(scope="session")
def expectations(parity_expectations):
    """The known divergences of this session (``--expect`` / ``PARITY_EXPECT`` / the default file)."""
    return parity_expectations


@pytest.fixture(scope="session")
def worker_paths(parity_worker_paths) -> dict:
    """``{backend: [folders]}`` from ``--worker-path`` / ``PARITY_WORKER_PATH``: pass
    ``worker_path=worker_paths.get(backend_name)`` to :func:`parity.evaluate`."""
    return parity_worker_paths


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend_name" in metafunc.fixturenames:
        from parity import backends

        names = metafunc.config.getoption("--backend") or list(backends.BUILTIN)
        metafunc.parametrize("backend_name", pytest_plugin.backend_params(metafunc.config, names))
