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
"""

from __future__ import annotations

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.precond.base import NAMES, Jacobi, Preconditioner
from hpcsolve.fem.linalg.precond.multigrid import Multigrid

__all__ = ["NAMES", "Preconditioner", "Jacobi", "Multigrid", "get"]


def get(value, field: str = "preconditioner", multigrid: dict | None = None) -> Preconditioner:
    """The preconditioner for a name or an instance; ``multigrid``: options of "mg" / "amg"
    (:class:`hpcsolve.fem.linalg.precond.multigrid.MGOptions` fields)."""
    if isinstance(value, Preconditioner):
        if multigrid:
            raise CaseError.invalid("multigrid", multigrid, "nothing with a Preconditioner instance",
                                    why="give the options to the instance (Multigrid(kind, options))")
        return value
    if value is None:
        value = "none"
    if not isinstance(value, str) or value.lower() not in NAMES:
        raise CaseError.invalid(field, value, ", ".join(NAMES) + " (or a hpcsolve.fem.linalg.precond.Preconditioner)")
    name = value.lower()
    if name in ("mg", "amg"):
        return Multigrid(name, multigrid)
    if multigrid:
        raise CaseError.invalid("multigrid", multigrid, f"nothing with preconditioner {name!r}",
                                why="multigrid options apply to preconditioner 'mg' or 'amg'")
    return Jacobi() if name == "jacobi" else Preconditioner()
