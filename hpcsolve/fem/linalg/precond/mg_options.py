"""The options of the multigrid preconditioners (:class:`MGOptions`, case section ``[solve.multigrid]``) and the
precisions, smoothers and aggregation methods they choose from.

A hierarchy's precision is a :class:`~hpcsolve.core.precision.Precision` policy (storage and compute dtypes), the
one vocabulary of the package: fp64 and fp32 are the policies of that name, and :data:`FP16_LEVELS` ("fp16") is the
multigrid-only one (16-bit level operators, float32 arithmetic). Code asks the policy (``policy.storage``,
``policy.compute``, :func:`unit_rows`), it never compares names."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from hpcsolve.core.errors import CaseError
from hpcsolve.core.precision import FP32, FP64, Precision

F64 = np.dtype(np.float64)

#: a hierarchy stored in 16 bits with float32 arithmetic (its rows scaled to a unit diagonal: :func:`unit_rows`)
FP16_LEVELS = Precision("fp16", np.dtype(np.float16), np.dtype(np.float32), frozenset({"fem"}),
                        description="multigrid levels: float16 operators (rows scaled to a unit diagonal), float32 "
                                    "arithmetic")
HIERARCHIES = {p.name: p for p in (FP64, FP32, FP16_LEVELS)}     #: the precisions a hierarchy is built in
SMOOTHERS = ("chebyshev", "jacobi")
AMG_METHODS = ("sa", "rs")
LEVEL_FORMATS = ("auto", "dia", "csr")
AMG_SETUPS = ("auto", "device", "pyamg")
#: where a kind's defaults differ from the dataclass's (mg's): smoothed aggregation ("amg" with amg = "sa") smooths
#: with Chebyshev of degree 3 on a wider interval, [0.1, 1.1] x lambda_max (its levels' lambda_max is the set-up's
#: Lanczos rho, where mg's power iteration underestimates and a wide interval diverges), and keeps connections above a
#: strength of 0.08 on its first level, 0.05 below, 0.02 on every level with several near-null vectors (3D
#: elasticity's 6 rigid-body modes at 0.08 / 0.05: aggregates too small, set-up 4-9x as long,
#: docs/design/fem_multigrid.md).
#: The choice and its measurements on the generated family
#: (``hpcsolve.fem.discrete.amg_family``): docs/design/fem_multigrid.md
KIND_DEFAULTS = {"amg": {"degree": 3, "cheby_lower": 0.1, "strength": 0.08, "coarse_strength": 0.05,
                         "system_strength": 0.02}}
#: a smoothed-aggregation level whose coarse level at its strength threshold would keep more than this fraction of
#: its rows, or have more than DENSE_COARSENING times its nonzeros, is aggregated again along every connection
#: (threshold 0, pyamg's default): 3D elasticity with its 6 rigid-body modes, aggregated by DOF at 0.08, kept about
#: every row (P1, a quarter cylinder of 10,719 unknowns: no coarse level with pyamg's aggregation, 9,666 coarse rows
#: with ours) or made a coarse level 8.7 times as dense as the fine one (P2, 21,231 unknowns: operator complexity 12)
SLOW_COARSENING = 0.5
DENSE_COARSENING = 2.0


@dataclass
class MGOptions:
    """Options of the multigrid preconditioners (docs/design/fem_solvers.md, case section ``[solve.multigrid]``)."""

    hierarchy: str = "fp32"        # precision of the level operators and V-cycle vectors: fp64 | fp32 | fp16 (a name
                                   # of HIERARCHIES or such a Precision; kept as its name, ``precision`` is the policy)
    smoother: str = "chebyshev"    # chebyshev | jacobi (damped, weight jacobi_weight / lambda_max(D^-1 A))
    degree: int = 2                # smoothing steps before and after the coarse correction (Chebyshev degree)
    coarse_size: int = 400         # a level with at most this many unknowns is solved directly (dense inverse)
    max_levels: int = 30
    amg: str = "sa"                # aggregation of "amg" (and below the geometric levels): sa | rs
    strength: float = 0.0          # strength threshold (sa: symmetric |a_ij| >= strength sqrt(a_ii a_jj), 0 = pyamg's
                                   # default; rs: classical, 0 means 0.25); amg: on its first aggregation level
    coarse_strength: float | None = None  # sa: the threshold on the levels below the first (None: strength)
    system_strength: float | None = None  # sa: the threshold of a level whose near-null space has several columns
                                          # (elasticity's rigid-body modes; None: strength / coarse_strength)
    cheby_lower: float = 0.3       # Chebyshev interval [cheby_lower, 1.1] x lambda_max(D^-1 A)
    jacobi_weight: float = 4.0 / 3.0  # damped Jacobi: omega = jacobi_weight / lambda_max
    power_iterations: int = 15     # power iterations estimating lambda_max(D^-1 A) per level
    flexible: bool = True          # outer flexible CG (beta = -z.Aq / p.Aq); False: standard PCG beta
    level_format: str = "auto"     # dia: levels with few diagonals (structured grids) stored by diagonals, the
                                   # others CSR | csr | auto: dia on the GPU, csr on the CPU (SciPy's CSR product)
    amg_setup: str = "auto"        # where smoothed aggregation is set up: device (sa_device: vectorized MIS(2)
                                   # aggregation and SpGEMM with the backend's array module; NumPy/SciPy where it has
                                   # no sparse library) | pyamg (pyamg's pieces on the host, the CPU reference) |
                                   # auto: device where the backend's arrays have a sparse library (CuPy), else pyamg
    aggregation_passes: int = 2    # the device set-up's aggregation (sa_device.mis2_aggregate): 2 also lets the nodes
                                   # the MIS(2) roots' neighbourhoods leave choose roots among themselves (one candidate
                                   # per node; fewer iterations, a longer set-up), 1 the MIS(2) roots only

    CHOICES = {"hierarchy": tuple(HIERARCHIES), "smoother": SMOOTHERS, "amg": AMG_METHODS,
               "level_format": LEVEL_FORMATS, "amg_setup": AMG_SETUPS}
    INTEGERS = {"degree": (1, 10), "coarse_size": (1, 5_000), "max_levels": (2, 60), "power_iterations": (2, 200),
                "aggregation_passes": (1, 2)}

    def __post_init__(self):
        if isinstance(self.hierarchy, Precision) and HIERARCHIES.get(self.hierarchy.name) == self.hierarchy:
            self.hierarchy = self.hierarchy.name
        for name, allowed in self.CHOICES.items():
            v = getattr(self, name)
            if not isinstance(v, str) or v.lower() not in allowed:
                raise CaseError.invalid(f"multigrid.{name}", v, ", ".join(allowed))
            setattr(self, name, v.lower())
        for name, (lo, hi) in self.INTEGERS.items():
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
                raise CaseError.invalid(f"multigrid.{name}", v, f"an integer in [{lo}, {hi}]")
            setattr(self, name, int(v))
        for name, lo, hi in (("strength", 0.0, 1.0), ("cheby_lower", 1e-3, 0.9), ("jacobi_weight", 0.1, 2.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not lo <= v <= hi:
                raise CaseError.invalid(f"multigrid.{name}", v, f"a number in [{lo:g}, {hi:g}]")
            setattr(self, name, float(v))
        for name in ("coarse_strength", "system_strength"):
            v = getattr(self, name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not 0 <= v <= 1:
                raise CaseError.invalid(f"multigrid.{name}", v, "a number in [0, 1] or None (as strength)")
            setattr(self, name, float(v))
        if not isinstance(self.flexible, (bool, np.bool_)):
            raise CaseError.invalid("multigrid.flexible", self.flexible, "true or false")
        self.flexible = bool(self.flexible)

    @classmethod
    def from_dict(cls, d: dict | None, field_name: str = "multigrid", kind: str | None = None) -> "MGOptions":
        """The options ``d`` gives, the others the defaults of ``kind`` (:data:`KIND_DEFAULTS`: amg's apply to
        smoothed aggregation; a ``strength`` given without ``coarse_strength`` holds on every level)."""
        if d is not None and not isinstance(d, dict):
            raise CaseError.invalid(field_name, d, "a dict of multigrid options (e.g. {'hierarchy': 'fp16'}) or "
                                    "a hpcsolve.fem.linalg.precond.multigrid.MGOptions")
        d = {k: v for k, v in dict(d or {}).items() if v is not None}
        known = {f.name for f in fields(cls)}
        for k in d:
            if k not in known:
                raise CaseError.invalid(f"{field_name}.{k}", d[k], ", ".join(sorted(known)), why="unknown multigrid option")
        defaults = dict(KIND_DEFAULTS.get(kind, {})) if str(d.get("amg", "sa")).lower() == "sa" else {}
        if "strength" in d:
            defaults.pop("coarse_strength", None)
            defaults.pop("system_strength", None)
        return cls(**{**defaults, **d})

    def strength_at(self, level: int, candidates: int = 1) -> float:
        """The strength threshold of aggregation level ``level`` (0: the first) for a near-null space of
        ``candidates`` columns on that level: ``system_strength`` on every level where there are several."""
        if candidates > 1 and self.system_strength is not None:
            return self.system_strength
        if level == 0:
            return self.strength
        return self.strength if self.coarse_strength is None else self.coarse_strength

    @property
    def precision(self) -> Precision:
        """The hierarchy's precision policy (before a matrix's range widens it: ``hierarchy.HierarchyBuilder``)."""
        return HIERARCHIES[self.hierarchy]

    def key(self) -> tuple:
        return tuple(getattr(self, f.name) for f in fields(self) if f.name != "flexible")



def unit_rows(policy: Precision) -> bool:
    """Whether a hierarchy in ``policy`` stores its level operators with rows scaled to a unit diagonal: storage
    narrower than the arithmetic (16-bit values of a 1e6 coefficient jump would overflow or flush to zero)."""
    return np.dtype(policy.storage).itemsize < np.dtype(policy.compute).itemsize
