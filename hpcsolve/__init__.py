"""hpcsolve: GPU scientific solvers that measure accuracy against speed across precisions.

The Python API (everything here is also ``hpcsolve.<name>``; ``dir(hpcsolve)`` lists it):

- cases: ``load_case(path, overrides)``, ``run_case(case, backend, precision, out=...)`` -> :class:`Result`,
  ``compare(case, ...)`` -> Comparison, ``load_result(folder)`` -> the :class:`Result` a run wrote there (its fields as
  NumPy arrays, ``result.grid.coordinates()``, metrics, status, ``summary()``);
- linear systems (also in :mod:`hpcsolve.fem`): ``solve(A, b, ...)`` -> (x, :class:`SolveReport`), SciPy-like
  (``rtol``, ``maxiter``, ``x0``, ``M``), ``Multigrid`` and ``StructuredGrid`` for geometric multigrid;
- ``resolve_backend("auto")``: the backend a run would take here (``.name``, ``.gpu``); ``get_precision(name)``.

``python -m hpcsolve ...`` is the ``hpcsolve`` command line.
"""

from hpcsolve.core.version import __version__  # noqa: E402
from hpcsolve.core.errors import (  # noqa: E402
    BackendError,
    BlowUpError,
    CaseError,
    HpcsolveError,
    OutputError,
)
from hpcsolve.core.precision import Precision, get_precision  # noqa: E402
from hpcsolve.core import backends as _backends  # noqa: E402  (already loaded by precision: probes nothing)
from hpcsolve.core.lazy import lazy_attributes  # noqa: E402


# The entry points live in modules that import numpy, scipy and the solver families; they load on first
# use (PEP 562), and ``hpcsolve.run_case`` *is* ``hpcsolve.run.run_case``: help() shows its real signature.
_LAZY = {"run_case": ("hpcsolve.run", "run_case"), "compare": ("hpcsolve.report.compare", "compare"),
         "load_case": ("hpcsolve.core.cases", "load_case"),
         "load_result": ("hpcsolve.core.results", "load_result"), "Result": ("hpcsolve.core.results", "Result"),
         "solve": ("hpcsolve.fem.api", "solve"), "SolveReport": ("hpcsolve.fem.linalg.report", "SolveReport"),
         "Multigrid": ("hpcsolve.fem.linalg.precond.multigrid", "Multigrid"),
         "StructuredGrid": ("hpcsolve.fem.linalg.precond.geometric", "StructuredGrid")}


def resolve_backend(name: str = "auto"):
    """The usable backend for ``name`` ('auto', 'numpy', 'cupy', 'numba-cuda'): 'auto' is CuPy where a GPU answers,
    else Numba-CUDA on a GPU, else NumPy. The object has ``.name`` and ``.gpu``; pass it (or its name) as
    ``backend=`` to run_case, compare and solve. A backend that cannot run here raises BackendError saying why."""
    return _backends.resolve(name, field="backend")


__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals())


__all__ = [
    "__version__",
    "BackendError",
    "BlowUpError",
    "CaseError",
    "HpcsolveError",
    "OutputError",
    "Precision",
    "get_precision",
    "resolve_backend",
    "compare",
    "load_case",
    "load_result",
    "Result",
    "run_case",
    "solve",
    "SolveReport",
    "Multigrid",
    "StructuredGrid",
]
