"""attn-parity: do attention backends with sliding windows compute the same function?

Public API (everything else is internal):

* :class:`Window`, :class:`Case`, :func:`make_inputs` - the canonical specification;
* :func:`attention_reference` - the banded float64 reference;
* :func:`compare`, :data:`BUDGETS` - the error budget and its measurements;
* :func:`check_mask`, :func:`check_gqa` - the exact mask and GQA probes;
* :class:`Backend`, :func:`get_backend`, :func:`register_backend` - the backend interface;
* :func:`evaluate` / :func:`assert_parity` - one backend on one case, as a row or an assertion;
* :func:`run_sweep` - many cases on many backends.
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .api import ParityError, assert_parity, check_gqa, check_mask, evaluate
    from .backends import Backend, Unsupported
    from .backends import get as get_backend
    from .backends import register as register_backend
    from .case import Case, Inputs, make_inputs
    from .reference import attention_reference
    from .sweep import run_sweep
    from .verdict import BUDGETS, Budget, compare
    from .window import SpecError, Window

#: Public name -> (module, attribute). Imported on first use (PEP 562), so ``import parity.X``
#: of a torch-free module (the pytest plugin, parity.markers) does not import torch.
_LAZY = {
    "ParityError": (".api", "ParityError"),
    "assert_parity": (".api", "assert_parity"),
    "check_gqa": (".api", "check_gqa"),
    "check_mask": (".api", "check_mask"),
    "evaluate": (".api", "evaluate"),
    "Backend": (".backends", "Backend"),
    "Unsupported": (".backends", "Unsupported"),
    "get_backend": (".backends", "get"),
    "register_backend": (".backends", "register"),
    "Case": (".case", "Case"),
    "Inputs": (".case", "Inputs"),
    "make_inputs": (".case", "make_inputs"),
    "attention_reference": (".reference", "attention_reference"),
    "run_sweep": (".sweep", "run_sweep"),
    "BUDGETS": (".verdict", "BUDGETS"),
    "Budget": (".verdict", "Budget"),
    "compare": (".verdict", "compare"),
    "SpecError": (".window", "SpecError"),
    "Window": (".window", "Window"),
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(mod, __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BUDGETS",
    "Backend",
    "Budget",
    "Case",
    "Inputs",
    "ParityError",
    "SpecError",
    "Unsupported",
    "Window",
    "__version__",
    "assert_parity",
    "attention_reference",
    "check_gqa",
    "check_mask",
    "compare",
    "evaluate",
    "get_backend",
    "make_inputs",
    "register_backend",
    "run_sweep",
]
