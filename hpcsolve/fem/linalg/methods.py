"""The solve methods of :func:`hpcsolve.fem.solve` and a case's ``solve.method``, each one object (:class:`Method`)
stating once what its name means: the precision it works in, the preconditioner it always runs with
("pcg-jacobi" is CG with the Jacobi preconditioner), whether it is a direct solve, the algorithm that runs it.

Code asks the object (``method.mixed``, ``method.direct``, ``method.preconditioner``), it never compares a method's
name; this module is where the names stand (the registry of preconditioners is
:mod:`hpcsolve.fem.linalg.precond.registry`).

    m = methods.get("pcg-jacobi")        # Method; CaseError naming the field where unknown
    m.preconditioner                     # "jacobi": the preconditioner it always runs with
    methods.with_preconditioner(methods.get("cg"), "jacobi").name     # "pcg-jacobi", as the report names it
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.cg_ir import solve_ir
from hpcsolve.fem.linalg.cg_reliable import solve_reliable
from hpcsolve.fem.linalg.cg_run import solve_plain


def _plain(state, policy):
    """CG wholly in the working precision (fp64 or fp32)."""
    return solve_plain(state, np.dtype(policy.compute))


def _reliable(state, policy):
    return solve_reliable(state)


def _refinement(state, policy):
    return solve_ir(state)


@dataclass(frozen=True)
class Method:
    """One solve method. ``mixed``: a mixed-precision strategy (precision 'mixed' only); ``direct``: a float64 direct
    solve (SuperLU) that takes no preconditioner and no matrix distributed over ranks; ``preconditioner``: the
    preconditioner it always runs with (None: the one asked for) and ``why`` it does; ``runs``: the method whose
    algorithm it is (pcg-jacobi runs cg); ``named_preconditioner``: what solve.preconditioner = "auto" means when a
    case names this method (cg named: plain CG); ``restarted``: outer float64 refinement steps, each an inner solve;
    ``algorithm(state, policy)``: the iteration (None: direct)."""

    name: str
    summary: str
    mixed: bool = False
    direct: bool = False
    preconditioner: str | None = None
    why: str = ""
    runs: str | None = None
    named_preconditioner: str | None = None
    restarted: bool = False
    algorithm: object = None

    @property
    def plain(self) -> bool:
        """CG in one working precision: its true residual stalls near kappa x that precision's unit roundoff."""
        return not self.mixed and not self.direct

    def label(self, pc) -> str:
        """The method as a report names it with the preconditioner object ``pc``: "cg+mg", "pcg-jacobi"."""
        return self.name if pc.identity or self.preconditioner else f"{self.name}+{pc.name}"

    def __str__(self) -> str:
        return self.name


_REGISTRY: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add ``method`` (a new name); returns it."""
    if method.name in _REGISTRY:
        raise ValueError(f"solve method {method.name!r} is registered already")
    _REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def get(name, field: str = "method") -> Method:
    """The method of a name (any case) or a Method; a CaseError naming ``field`` lists the names where unknown."""
    if isinstance(name, Method):
        return name
    if isinstance(name, str) and name.lower() in _REGISTRY:
        return _REGISTRY[name.lower()]
    raise CaseError.invalid(field, name, ", ".join(_REGISTRY))


def for_precision(policy, name=None, field: str = "method") -> Method:
    """The method for a precision policy: ``name`` (default: the policy's ``fem_method``), refused where it does not
    work in that precision (a mixed strategy needs precision 'mixed' and 'mixed' needs one; direct: float64)."""
    method = get(name if name is not None else policy.fem_method, field)
    if policy.refinement and not method.mixed:
        raise CaseError.invalid(field, method.name, ", ".join(m.name for m in _REGISTRY.values() if m.mixed),
                                why="precision 'mixed' is float32 work with float64 accuracy; pick a strategy")
    if not policy.refinement and method.mixed:
        raise CaseError.invalid(field, method.name, ", ".join(m.name for m in _REGISTRY.values() if not m.mixed),
                                why=f"{method.name} is a mixed-precision strategy; use precision='mixed'")
    if method.direct and np.dtype(policy.compute) != np.float64:
        raise CaseError.invalid(field, method.name, ", ".join(m.name for m in _REGISTRY.values() if m.plain),
                                why=f"{method.name} is the float64 direct reference")
    return method


def with_preconditioner(method: Method, pc_name: str) -> Method:
    """The method as named with the preconditioner ``pc_name``: the registered method that runs ``method`` with that
    preconditioner always (cg with jacobi: pcg-jacobi), else ``method`` itself."""
    for m in _REGISTRY.values():
        if m.runs == method.name and m.preconditioner == pc_name:
            return m
    return method


def check_preconditioner(method: Method, asked: str, field: str, method_field: str = "method") -> None:
    """A method that always runs with one preconditioner takes that one, "none" or "auto" (``asked``: a canonical
    preconditioner name); else a CaseError naming ``field``, saying why (``method.why``)."""
    fixed = method.preconditioner
    if fixed is None or asked in (fixed, "none", "auto"):
        return
    takes = list(dict.fromkeys(("auto", fixed, "none")))
    free = next(m.name for m in _REGISTRY.values() if m.preconditioner is None and not m.direct)
    raise CaseError.invalid(field, asked, f"{', '.join(takes[:-1])} or {takes[-1]} with {method_field} = "
                            f"{method.name!r} (or a method that takes any, e.g. {method_field} = {free!r}, with {asked})",
                            why=f"{method_field} {method.name!r} {method.why}")


register(Method("cg", "CG in the working precision (fp64 or fp32), any preconditioner",
                named_preconditioner="none", algorithm=_plain))
register(Method("pcg-jacobi", "CG with the Jacobi preconditioner, in the working precision", preconditioner="jacobi",
                why="is CG with the Jacobi preconditioner", runs="cg", algorithm=_plain))
register(Method("ir-restarted", "restarted iterative refinement: float32 CG corrections, float64 residuals",
                mixed=True, restarted=True, algorithm=_refinement))
register(Method("cg-reliable", "CG with reliable updates: float32 recurrences, float64 residual replacements",
                mixed=True, algorithm=_reliable))
register(Method("spsolve", "the float64 direct solve (SuperLU)", direct=True, preconditioner="none",
                why="is a direct solve (SuperLU), which takes no preconditioner"))
