"""hpcsolve: GPU scientific solvers that measure accuracy against speed across precisions."""

__version__ = "0.1.0"

from hpcsolve.errors import (  # noqa: E402
    BackendError,
    BlowUpError,
    CaseError,
    HpcsolveError,
)
from hpcsolve.precision import Precision, get_precision  # noqa: E402


def run_case(*args, **kwargs):
    """Run a case and return its Result; see :func:`hpcsolve.run.run_case`."""
    from hpcsolve.run import run_case as _run_case

    return _run_case(*args, **kwargs)


def compare(*args, **kwargs):
    """Accuracy vs speed across backends x precisions; see :func:`hpcsolve.report.compare.compare`."""
    from hpcsolve.report.compare import compare as _compare

    return _compare(*args, **kwargs)


def load_case(*args, **kwargs):
    """Load and validate a TOML case file; see :func:`hpcsolve.cases.load_case`."""
    from hpcsolve.cases import load_case as _load

    return _load(*args, **kwargs)


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
