"""The options of the conjugate gradients (:class:`CGOptions`: ``hpcsolve.fem.solve``'s keywords and a case's
``[solve]`` section) and the dtypes they work in (the method names: :mod:`hpcsolve.fem.linalg.methods`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from hpcsolve.core.errors import CaseError

F64 = np.dtype(np.float64)
F32 = np.dtype(np.float32)
U32 = 2.0 ** -24
MAX_BLOCK = 10_000


@dataclass(frozen=True)
class Accumulation:
    """How cg-reliable folds its float32 partial solution y into the float64 x (``CGOptions.accumulate``, by name):
    ``every_block``: fold at every block of iterations too, not only at residual replacements; ``wide_x``: no y at
    all, the fused kernels update x in float64 (x64 += alpha p32; only the NumPy low ops have that update: a study
    option)."""

    name: str
    every_block: bool = False
    wide_x: bool = False


#: the accumulation modes by name: the only place their names are compared
ACCUMULATIONS = {a.name: a for a in (Accumulation("replace"), Accumulation("block", every_block=True),
                                     Accumulation("fp64", wide_x=True))}


@dataclass
class CGOptions:
    """The options of every method and backend, with one set of defaults (docs/design/fem_solvers.md)."""

    rtol: float = 1e-8             # target on the float64 true relative residual ||b - A x|| / ||b||
    maxiter: int = 10_000          # total Krylov iterations (float32 + float64); solve() defaults to 10 n
    check_every: int = 64          # k: iterations per block (one CUDA graph); the host decides once per block
    true_every: int = 0            # also record the float64 true residual every N iterations (0: at decisions)
    stall_checks: int = 3          # fp32 CG: true-residual checks without a 10% improvement -> stalled
    # ir-restarted
    inner_rtol: float = 1e-4       # smallest inner tolerance asked of float32 CG (it adapts upward)
    max_outer: int = 30            # refinement steps before falling back to float64 CG (MAGMA dsposv)
    stagnation: float = 0.9        # an outer step that reduces the true residual by less than this stagnates
    # cg-reliable
    reliable_criterion: str = "vdvye"  # when to replace: "vdvye" (rounding estimate, van der Vorst & Ye) | "delta" (QUDA)
    reliable_delta: float = 0.1    # "delta": replace when the residual has fallen by this factor since the last one
    reliable_patience: int = 8     # replacements without halving the best true residual -> fall back to float64
    reliable_p: str = "correct"    # p at a replacement: "correct" p += M^-1 (r_true - r_rec) | "keep" | "rebeta"
    accumulate: str = "replace"    # fold y into x64: "replace" (at replacements) | "block" (every block) | "fp64"
    kappa_limit: float = 1.0 / U32  # promote to float64 recurrences above this Lanczos kappa estimate (0: never);
    #                                kappa u32 > 1: float32 recurrences cannot reduce the residual (measured on
    #                                the H200 at 4096^2, kappa 6.8e6: promoting at 3e6 cost 1.02x fp64's time,
    #                                staying in float32 0.73x)
    kappa_min_iterations: int = 256  # first kappa check; then at doublings of the iteration count

    CHOICES = {"reliable_criterion": ("vdvye", "delta"), "reliable_p": ("correct", "keep", "rebeta"),
               "accumulate": tuple(ACCUMULATIONS)}
    INTEGERS = {"maxiter": 1, "check_every": 1, "true_every": 0, "stall_checks": 1, "max_outer": 1,
                "reliable_patience": 1, "kappa_min_iterations": 1}     # name: smallest value
    FRACTIONS = ("rtol", "inner_rtol", "stagnation", "reliable_delta")  # numbers in (0, 1)

    @property
    def accumulation(self) -> Accumulation:
        """The :class:`Accumulation` that ``accumulate`` names."""
        return ACCUMULATIONS[self.accumulate]

    def __post_init__(self):
        for name, low in self.INTEGERS.items():
            value = getattr(self, name)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < low:
                raise CaseError.invalid(name, value, f"an integer >= {low}")
            setattr(self, name, int(value))
        if self.check_every > MAX_BLOCK:
            raise CaseError.invalid("check_every", self.check_every, f"an integer in [1, {MAX_BLOCK}]")
        for name in self.FRACTIONS:
            value = getattr(self, name)
            if not _real(value) or not 0 < value < 1:
                raise CaseError.invalid(name, value, "a number in (0, 1)")
            setattr(self, name, float(value))
        if not _real(self.kappa_limit) or math.isnan(self.kappa_limit) or self.kappa_limit < 0:
            raise CaseError.invalid("kappa_limit", self.kappa_limit, "a number >= 0 (0 or inf: never promote)")
        self.kappa_limit = float(self.kappa_limit)
        for name, allowed in self.CHOICES.items():
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise CaseError.invalid(name, value, ", ".join(allowed))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


def _real(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
