"""Preconditioners of the conjugate gradients in :mod:`hpcsolve.fem.linalg.cg`, over the same low ops.

``preconditioner=`` of ``hpcsolve.fem.solve`` is a name ("none", "jacobi") or a
:class:`Preconditioner`. Two kinds plug into the one CG:

- *diagonal* (``diagonal`` returns D^-1 in the working dtype): fused into the CG kernels (the r
  update accumulates r.D^-1 r, the p update forms D^-1 r), so Jacobi costs one more vector read per
  kernel and no extra pass: ``Jacobi``.
- *general* (``apply``): z = M^-1 r as its own launches after the r update, then the p update uses z:
  the multigrid V-cycles of :mod:`hpcsolve.fem.linalg.precond.multigrid` ("mg" geometric, "amg" algebraic). With
  ``flexible`` True the CG's beta is the flexible one (-z.Aq / p.Aq, Notay 2000), which does not
  assume that M is exactly symmetric (a V-cycle in float32 or 16-bit storage is not). ``apply`` must only launch work
  on the low ops' stream (no allocation, no synchronization), so that a block of CG iterations can
  still be captured into one CUDA graph; its hierarchy may be stored in a lower precision than the
  vectors it is applied to (it is called with r and z of the working dtype).

A SciPy-style ``M`` (a ``scipy.sparse.linalg.LinearOperator``, a sparse or dense matrix, applied as z = M @ r, so M
approximates A^-1 as in ``scipy.sparse.linalg.cg(M=...)``) is a general preconditioner too
(:class:`HostOperator`), on the NumPy backend only: on a GPU it would copy r to the host and z back on every iteration
and break the CUDA-graph capture of the CG blocks, so it is refused there naming the device preconditioners.
"""

from __future__ import annotations

import scipy.sparse as sp

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.precond import registry
from hpcsolve.fem.linalg.precond.base import Jacobi, Preconditioner
from hpcsolve.fem.linalg.precond.multigrid import Multigrid

__all__ = ["NAMES", "Preconditioner", "Jacobi", "Multigrid", "HostOperator", "get", "registry"]


def allowed() -> str:
    """What ``preconditioner=`` of ``solve`` takes: the registered names ("auto" first, :mod:`registry`), an instance
    or a SciPy-style M."""
    return (", ".join(registry.names()) + ", a hpcsolve.fem.Multigrid or Preconditioner, or (NumPy "
            "backend) a scipy.sparse.linalg.LinearOperator or matrix M ~ A^-1")


def __getattr__(name: str):
    if name == "NAMES":           # the registered names, as they are now (a preconditioner may be registered later)
        return registry.names(include_auto=False)
    if name == "ALLOWED":
        return allowed()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class HostOperator(Preconditioner):
    """z = M @ r for a user's ``M`` (SciPy ``LinearOperator``, sparse matrix or 2D array, M ~ A^-1: SciPy's ``M=``
    convention), applied on the host in its own dtype and cast to the working precision's z. NumPy backend only
    (see the module docstring). Standard (not flexible) CG, as SciPy's ``cg``: M should be symmetric positive
    definite. ``scale`` is set by ``hpcsolve.fem.solve`` where it scaled A by a power of two (float32 range):
    the preconditioner of 2^k A is 2^-k M."""

    identity = False
    name = "operator"          # the report's method reads "cg+operator"

    def __init__(self, op, field: str = "preconditioner"):
        shape = getattr(op, "shape", None)
        if shape is None or len(shape) != 2 or shape[0] != shape[1] or not hasattr(op, "dot"):
            raise CaseError.invalid(field, type(op).__name__, allowed())
        self.op, self.field, self.scale = op, field, 1.0
        self.type = type(op).__name__

    def setup(self, A) -> None:
        if A.backend.gpu:
            raise CaseError.invalid(self.field, f"a {self.type} (host)", "'jacobi', 'amg', a hpcsolve.fem.Multigrid "
                                    f"on backend {A.backend.name!r}, or backend='numpy'",
                                    why="a SciPy operator runs on the host: applying it on every CG iteration "
                                        "would copy each residual off the GPU and back")
        if self.op.shape[0] != A.global_n:
            raise CaseError.invalid(self.field, f"shape {tuple(self.op.shape)}", f"({A.global_n}, {A.global_n}) "
                                    "(the size of A)", why="the preconditioner does not match the matrix")

    def apply(self, r, z, rz=None) -> None:
        y = self.op.dot(r)
        z[:] = (self.scale * y).reshape(z.shape) if self.scale != 1.0 else y.reshape(z.shape)
        if rz is not None:
            rz.add(r, z)

    def info(self) -> dict:
        return {"kind": self.name, "type": self.type, "shape": list(self.op.shape), "dtype": str(getattr(self.op, "dtype", ""))}


def _host_operator(value) -> bool:
    """Whether ``value`` is a SciPy-style M (a LinearOperator, a sparse matrix or a 2D array)."""
    if sp.issparse(value):
        return True
    if type(value).__module__.startswith("numpy") and getattr(value, "ndim", 0) == 2:
        return True
    try:
        from scipy.sparse.linalg import LinearOperator     # late: 0.25 s, only for a caller who passes one
    except ImportError:      # pragma: no cover - scipy is a dependency
        return False
    return isinstance(value, LinearOperator)


def get(value, field: str = "preconditioner", multigrid: dict | None = None, near_nullspace=None) -> Preconditioner:
    """The preconditioner for a name (:func:`registry.get`: the spec builds it), a spec, an instance or a SciPy-style M
    (:class:`HostOperator`); ``multigrid``: options of a spec that takes them (mg / amg:
    :class:`hpcsolve.fem.linalg.precond.mg_options.MGOptions` fields); ``near_nullspace``: the n x k near-null space
    of a spec that takes one (amg: smoothed aggregation's B, e.g. rigid-body modes); ``field``: the argument's name
    in errors ("preconditioner", or "M")."""
    if isinstance(value, Preconditioner):
        if multigrid or near_nullspace is not None:
            what, given = ("multigrid", multigrid) if multigrid else ("near_nullspace", "an array")
            raise CaseError.invalid(what, given, "nothing with a Preconditioner instance",
                                    why="give it to the instance (Multigrid(kind, options, near_nullspace=...))")
        return value
    if value is None:
        value = registry.get("none")
    if not isinstance(value, (str, registry.PreconditionerSpec)) and _host_operator(value):
        if multigrid:
            takes = " or ".join(repr(s) for s in registry.names() if registry.get(s).options_field)
            raise CaseError.invalid("multigrid", multigrid, f"nothing with a {type(value).__name__} {field}",
                                    why=f"multigrid options apply to preconditioner {takes}")
        return HostOperator(value, field)
    try:
        spec = registry.get(value, field)
    except CaseError:
        raise CaseError.invalid(field, value, allowed()) from None
    if spec.build is None:        # "auto" needs a run's situation (a case): a solve is given what it runs
        raise CaseError.invalid(field, value, allowed(), why=f"{spec.name!r} is resolved by hpcsolve.fem.solve (a "
                                                            "probe of the matrix) or by a case's run")
    if near_nullspace is not None and not spec.near_nullspace:
        takes = " or ".join(repr(n) for n in registry.names() if registry.get(n).near_nullspace)
        raise CaseError.invalid("near_nullspace", "an array", f"nothing with preconditioner {spec.name!r}",
                                why=f"a near-null space is used by preconditioner {takes}")
    return spec.make(registry.Inputs(options=multigrid, field="multigrid", near_nullspace=near_nullspace))
