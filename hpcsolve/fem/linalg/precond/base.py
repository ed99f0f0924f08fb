"""The preconditioner interface (:class:`Preconditioner`, the identity) and the diagonal one (:class:`Jacobi`)."""

from __future__ import annotations


class Preconditioner:
    """M ~ A^-1. The base class is the identity (no preconditioning)."""

    name = "none"
    identity = True
    flexible = False       #: general preconditioners: use flexible CG's beta
    cycles = 0             #: general preconditioners: applications counted by the CG
    block = 0              #: general preconditioners: at most this many iterations per block (0: the CG's
    #                         check_every); a costly M (a V-cycle) asks for short blocks so the solve stops
    #                         within an iteration or two of convergence

    def info(self) -> dict:
        """What the solve report shows about the preconditioner (levels, set-up time, ...)."""
        return {}

    def setup(self, A) -> None:
        """Build what ``apply`` needs on A's device (called once per solve, before the timed part)."""

    def diagonal(self, A, dtype):
        """D^-1 in ``dtype`` for a diagonal preconditioner (fused into the CG kernels), else None."""
        return None

    def apply(self, r, z, rz=None) -> None:
        """z = M^-1 r (general preconditioners), with what ``setup`` bound (A's low ops, a hierarchy); with ``rz``,
        r.z is added where the CG keeps it: ``rz.add(r, z)`` launches the dot, or a low op that can fuse it takes
        ``*rz.target`` as its ``ws, i`` arguments (the CG's scalar slot; the preconditioner never picks one). Launches
        only, on the low ops' stream: no allocation, no synchronization (the CG captures it into CUDA graphs)."""
        raise NotImplementedError


class Jacobi(Preconditioner):
    """M = diag(A)^-1, fused into the CG kernels (1 / a_ii computed in float64 when A was checked)."""

    name = "jacobi"
    identity = False

    def diagonal(self, A, dtype):
        return A.dinv(dtype)
