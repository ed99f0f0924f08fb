"""hpcsolve: GPU scientific solvers that measure accuracy against speed across precisions."""

from hpcsolve.core.version import __version__  # noqa: E402
from hpcsolve.core.errors import (  # noqa: E402
    BackendError,
    BlowUpError,
    CaseError,
    HpcsolveError,
)
from hpcsolve.core.precision import Precision, get_precision  # noqa: E402


# The entry points live in modules that import numpy, scipy and the solver families; they load on first
# use (PEP 562), and ``hpcsolve.run_case`` *is* ``hpcsolve.run.run_case``: help() shows its real signature.
_LAZY = {"run_case": ("hpcsolve.run", "run_case"), "compare": ("hpcsolve.report.compare", "compare"),
         "load_case": ("hpcsolve.core.cases", "load_case")}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'hpcsolve' has no attribute {name!r}")


__all__ = [
    "__version__",
    "BackendError",
    "BlowUpError",
    "CaseError",
    "HpcsolveError",
    "Precision",
    "get_precision",
    "compare",
    "load_case",
    "run_case",
]
