"""Preconditioners of the conjugate gradients in :mod:`hpcsolve.fem.cg`, over the same low ops.

``preconditioner=`` of ``hpcsolve.fem.solve`` is a name ("none", "jacobi") or a
:class:`Preconditioner`. Two kinds plug into the one CG:

- *diagonal* (``diagonal`` returns D^-1 in the working dtype): fused into the CG kernels (the r
  update accumulates r.D^-1 r, the p update forms D^-1 r), so Jacobi costs one more vector read per
  kernel and no extra pass: ``Jacobi``.
- *general* (``apply``): z = M^-1 r as its own launches after the r update, then the p update uses z.
  A multigrid V-cycle or an AMG hierarchy would be this kind. ``apply`` must only launch work
  on the low ops' stream (no allocation, no synchronization), so that a block of CG iterations can
  still be captured into one CUDA graph; its hierarchy may be stored in a lower precision than the
  vectors it is applied to (it is called with r and z of the working dtype).
"""

from __future__ import annotations

from hpcsolve.errors import CaseError

NAMES = ("none", "jacobi")


class Preconditioner:
    """M ~ A^-1. The base class is the identity (no preconditioning)."""

    name = "none"
    identity = True

    def setup(self, A) -> None:
        """Build what ``apply`` needs on A's device (called once per solve, before the timed part)."""

    def diagonal(self, A, dtype):
        """D^-1 in ``dtype`` for a diagonal preconditioner (fused into the CG kernels), else None."""
        return None

    def apply(self, low, A, r, z, ws, i_rz) -> None:
        """z = M^-1 r and ws[i_rz] += r.z (general preconditioners)."""
        raise NotImplementedError


class Jacobi(Preconditioner):
    """M = diag(A)^-1, fused into the CG kernels (1 / a_ii computed in float64 when A was checked)."""

    name = "jacobi"
    identity = False

    def diagonal(self, A, dtype):
        return A.dinv(dtype)


def get(value, field: str = "preconditioner") -> Preconditioner:
    """The preconditioner for a name or an instance."""
    if isinstance(value, Preconditioner):
        return value
    if value is None:
        return Preconditioner()
    if not isinstance(value, str) or value.lower() not in NAMES:
        raise CaseError.invalid(field, value, ", ".join(NAMES) + " (or a hpcsolve.fem.precond.Preconditioner)")
    return Jacobi() if value.lower() == "jacobi" else Preconditioner()
