"""A multigrid hierarchy (:class:`Hierarchy`, a plain object) and what every builder shares (:class:`HierarchyBuilder`).

A builder turns a prepared matrix into a :class:`Hierarchy`, as pyamg's ``*_solver`` functions return a
``MultilevelSolver`` that its cycle then runs: levels ``A_0 = A, A_1 = R_0 A_0 P_0, ...`` (Galerkin, R = P^T) with
their transfers, smoother data (1 / diag, lambda_max(D^-1 A), the smoothing coefficients) and V-cycle vectors, and
the coarsest level's dense (generalized) inverse. The builders differ only in where the prolongations P come from
(:meth:`HierarchyBuilder.coarsen`): ``geometric.GeometricBuilder`` (nested structured grids, then aggregation below
them), ``aggregation.PyamgBuilder`` (pyamg's smoothed aggregation pieces or Ruge-Stueben, on the host) and
``sa_device.DeviceSABuilder`` (smoothed aggregation with the backend's array module). The rest is here, once:

- the fine matrix in float64 (divided by a power of two where its diagonal lies outside [1e-20, 1e20]);
- the hierarchy's precision (``MGOptions.precision``), widened to float64 where the diagonal spreads beyond
  ``SCALED_RANGE_LIMIT`` (a note says so), and unit-diagonal levels where it spreads beyond what the precision holds
  unscaled (:func:`diagonal_range_limit`; the V-cycle then scales r and z: ``Hierarchy.dscale``);
- the levels on the device (CSR or DIA, ``layout``), the coarsest level (``coarse.coarse_inverse``), the V-cycle
  vectors and the smoothers (``cycle``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from hpcsolve.core.errors import CaseError
from hpcsolve.core.precision import FP64, Precision
from hpcsolve.fem.linalg.lowops import LevelCSR
from hpcsolve.fem.linalg.precond import layout
from hpcsolve.fem.linalg.precond.coarse import DENSE_COARSE_MAX, coarse_inverse
from hpcsolve.fem.linalg.precond.cycle import (Level, alloc_buffers, lambda_max_host, lambda_max_levels,
                                               smoother_coefficients)
from hpcsolve.fem.linalg.precond.layout import canonical, from_dev, host, host_csr
from hpcsolve.fem.linalg.precond.mg_options import F64, MGOptions, unit_rows

#: beyond this max / min of the diagonal even the unit-diagonal levels' transfers (entries up to the ratio's square
#: root) and scales leave float32: such a hierarchy is built in float64 instead (with a note)
SCALED_RANGE_LIMIT = 1e64


def diagonal_range_limit(compute) -> float:
    """The largest max / min of a matrix's positive diagonal that a hierarchy computing in ``compute`` takes as it
    stands: sqrt of the dtype's largest number (1.8e19 for float32). Beyond it a_ii and 1 / a_ii of one level leave
    the dtype's range together (1e40 coefficient contrasts broke the float32 V-cycle with NaN)."""
    return math.sqrt(float(np.finfo(compute).max))


@dataclass(eq=False)
class Hierarchy:
    """What a builder made of one matrix: the levels (operator, 1 / diag, P, R, lambda_max, smoothing coefficients,
    V-cycle vectors), the coarsest level's dense inverse and vectors, the scalings the V-cycle applies, and what the
    report shows about the set-up. ``grid`` / ``near_nullspace``: the objects it was built from (a cached hierarchy
    serves a set-up for these very objects only)."""

    A: object                                  # the prepared matrix (its low ops run the V-cycle)
    precision: Precision = FP64                # of the level operators and V-cycle vectors (after the range checks)
    grid: object = None
    near_nullspace: object = None
    levels: list = field(default_factory=list)         # cycle.Level, finest first
    coarse: LevelCSR | None = None                      # the coarsest level's dense (generalized) inverse
    coarse_bufs: dict = field(default_factory=dict)     # b, x (and t, d where there are no levels: scaling scratch)
    coarse_rows: int = 0
    coarse_nnz: int = 0
    coarse_rank: int = 0                       # below coarse_rows where the coarsest level is singular
    scale: float = 1.0                         # the levels are of A / scale: z is scaled back
    dscale: object = None                      # unit-diagonal levels: sqrt(sigma / a_ii) of the finest (compute dtype)
    scaling: str = ""                          # the note on unit-diagonal levels or a float64 hierarchy ("": neither)
    coarsening: str = ""                       # why the coarsest level is above coarse_size ("": it is not)
    amg: str = ""                              # the aggregation method where aggregation built levels (or was asked)
    amg_setup: str = ""                        # where the aggregation levels were set up: device | pyamg | ""
    setup_kind: str = "full"                   # "numeric": a values-only update (the aggregates reused)
    setup_time_s: float = 0.0
    full_setup_time_s: float = float("nan")    # the full set-up's seconds (where this one was numeric: the earlier)
    setup_phases_s: dict = field(default_factory=dict)
    symmetry_defect: float = float("nan")      # |x.My - y.Mx| / (|x| |My|), measured after the set-up
    symmetry_check_s: float = 0.0
    level_time_s: list = field(default_factory=list)    # Multigrid.time_levels

    def made_from(self, grid, near_nullspace) -> bool:
        return self.grid is grid and self.near_nullspace is near_nullspace

    def info(self) -> dict:
        """Levels, complexities, set-up: the hierarchy's part of ``Multigrid.info``."""
        rows = [lvl.A.rows for lvl in self.levels] + [self.coarse_rows]
        nnz = [lvl.A.nnz for lvl in self.levels] + [self.coarse_nnz]
        return {
            "amg": self.amg, "levels": len(rows), "rows": rows, "nnz": nnz,
            "level_kinds": [lvl.kind for lvl in self.levels] + ["direct"],
            "coarse_rank": self.coarse_rank, "coarsening": self.coarsening, "scaling": self.scaling,
            "level_formats": [lvl.A.format for lvl in self.levels] + ["dense"],
            "operator_complexity": float(sum(nnz) / nnz[0]) if nnz and nnz[0] else float("nan"),
            "grid_complexity": float(sum(rows) / rows[0]) if rows and rows[0] else float("nan"),
            "lambda_max": [lvl.lam for lvl in self.levels],
            "setup_time_s": self.setup_time_s, "setup_phases_s": dict(self.setup_phases_s),
            "setup_kind": self.setup_kind, "full_setup_time_s": self.full_setup_time_s, "amg_setup": self.amg_setup,
            "symmetry_defect": self.symmetry_defect, "symmetry_check_s": self.symmetry_check_s,
            "level_time_s": list(self.level_time_s),
        }


class _Phases:
    """Wall seconds of the set-up's phases (the device synchronized at each phase's end), summed by name."""

    def __init__(self, low):
        self.low, self.seconds, self._t = low, {}, time.perf_counter()

    def done(self, name: str) -> None:
        self.low.sync()
        t = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + (t - self._t)
        self._t = t


class HierarchyBuilder:
    """Builds a :class:`Hierarchy` of a prepared matrix (:meth:`build`). A subclass says where the levels come from
    (:meth:`coarsen`); ``needs_grid``: it takes a structured grid (``geometric.StructuredGrid``); ``algebraic``:
    aggregation is its method (the report names the aggregation options even where no level was aggregated).
    ``key``: the hierarchy's key in ``A.cache`` (what a builder keeps beside it, such as the aggregates, is keyed
    from it). One builder builds once."""

    needs_grid = False
    algebraic = False
    #: a level this small gets its lambda_max on the host (float64): on a GPU its power iteration is launches and
    #: synchronizations, not work; geometric levels this small are built on the host too
    host_build_rows = 1 << 12

    def __init__(self, options: MGOptions, *, grid=None, near_nullspace=None, field: str = "multigrid",
                 key: tuple = ()):
        self.options, self.grid, self.near_nullspace, self.field, self.key = options, grid, near_nullspace, field, key
        self.mats: list = []       # (A_l, P_l, kind, R_l or None) in float64, SciPy or CuPy sparse
        #: lambda_max(D^-1 A_l) by level index where the level's builder computed it (smoothed aggregation's Lanczos
        #: rho, accurate to about 1%); the other levels get a power iteration (:meth:`_smoothers`)
        self.lambdas: dict[int, float] = {}
        self.phases: _Phases | None = None

    @classmethod
    def choose(cls, options: MGOptions, xp) -> type["HierarchyBuilder"]:
        """The builder class that builds for these options with arrays of ``xp`` (itself, unless a family of builders
        picks one of its members)."""
        return cls

    # ---- what a builder says
    def check(self, A) -> None:
        """A CaseError naming what does not fit A (the near-null space; a subclass checks its grid)."""
        if self.near_nullspace is not None:
            _check_near_nullspace(self.near_nullspace, A.n)

    def coarsen(self, A, h: Hierarchy, cur, nns, xp, sparse):
        """Append the levels below ``cur`` (float64, a matrix of ``sparse``) to ``self.mats`` while they coarsen;
        returns (the coarsest level's matrix, xp, sparse: the modules it is in). Here: aggregation
        (:meth:`aggregate`) where ``cur`` is above ``coarse_size`` with levels to spare."""
        opts = self.options
        if cur.shape[0] > opts.coarse_size and len(self.mats) < opts.max_levels - 1:
            # aggregation from here on; the near-null space applies on its finest level only
            cur = self.aggregate(A, h, cur, nns, xp, sparse)
            self.phases.done("aggregation")
        return cur, xp, sparse

    def aggregate(self, A, h: Hierarchy, cur, nns, xp, sparse):
        """Append aggregation levels below ``cur`` to ``self.mats`` (an aggregation builder's job); returns the
        coarsest level's matrix."""
        raise NotImplementedError

    def timed(self, A, h: Hierarchy) -> None:
        """Called with the set-up's time known (``h.setup_time_s``): a builder that keeps something on A for later
        set-ups records it there."""

    # ---- the build
    def build(self, A) -> Hierarchy:
        """The hierarchy on A's device (the work on A's stream; the device synchronized at the end)."""
        t0 = time.perf_counter()
        low = A.low
        with low.context():       # CuPy set-up work on the stream of the kernels it feeds (no races)
            h = self._build(A)
        low.sync()
        h.setup_time_s = time.perf_counter() - t0
        if h.setup_kind == "full":
            h.full_setup_time_s = h.setup_time_s
        self.timed(A, h)
        return h

    def _build(self, A) -> Hierarchy:
        """Geometric levels while the grid halves and aggregation below them (the builder's :meth:`coarsen`), then
        what every builder does: unit diagonals where the range needs them, the levels uploaded in their storage
        format, the coarsest level's dense inverse, the V-cycle vectors and the smoothers."""
        low, opts = A.low, self.options
        h = Hierarchy(A=A, grid=self.grid, near_nullspace=self.near_nullspace)
        h.precision, ratio = self._range_fallback(A, h)
        ph = self.phases = _Phases(low)
        cur = self._fine_matrix(A, h)
        nns = None if self.near_nullspace is None else np.asarray(self.near_nullspace, dtype=np.float64)
        ph.done("matrix")
        xp, sparse = low.sparse_modules()
        cur, xp, sparse = self.coarsen(A, h, cur, nns, xp, sparse)
        if self.algebraic or any(kind == "aggregation" for _, _, kind, _ in self.mats):
            h.amg = opts.amg
        cur = self._unit_diagonals(low, h, cur, ratio)
        ph.done("unit diagonals")
        self._device_levels(A, h, sparse)
        self._coarsest(low, h, cur)
        ph.done("coarse inverse")
        self._workspace(low, h)
        ph.done("buffers")
        self._smoothers(low, h)
        ph.done("lambda_max")
        h.setup_phases_s = ph.seconds
        return h

    def _fine_matrix(self, A, h: Hierarchy):
        """A in float64 as a SciPy (NumPy backends) or CuPy sparse matrix, divided by ``h.scale``."""
        low = A.low
        xp, sparse = low.sparse_modules()
        # a matrix outside [1e-20, 1e20] is built as A / s, s a power of two near max a_ii, so that float32 and
        # 16-bit levels hold any matrix float64 can (M(A) = M(A / s) / s: the V-cycle scales z back)
        d = A.max_diag
        h.scale = 2.0 ** round(math.log2(d)) if d > 0 and math.isfinite(d) and not 1e-20 <= d <= 1e20 else 1.0
        if xp is np:
            cur = A.to_scipy() if not low.host_resident else sp.csr_matrix((A.vals[F64], A.indices, A.indptr), shape=A.shape)
        else:
            # the solve's own arrays (Numba-CUDA's seen by CuPy through the CUDA array interface)
            cur = sparse.csr_matrix((from_dev(low, A.vals[F64], xp), from_dev(low, A.indices, xp),
                                     from_dev(low, A.indptr, xp)), shape=A.shape)
        if h.scale != 1.0:
            cur = cur * (1.0 / h.scale)     # a new matrix; A itself is untouched
        return cur

    def _range_fallback(self, A, h: Hierarchy) -> tuple[Precision, float]:
        """(the hierarchy's precision, max / min of A's diagonal): float64 with a note where the diagonal spreads
        beyond what even a unit-diagonal hierarchy of the options' precision holds (``SCALED_RANGE_LIMIT``), else the
        options' precision."""
        policy = self.options.precision
        if np.dtype(policy.compute) == F64:
            return policy, 1.0
        ratio = _diagonal_ratio(A)
        if not ratio > SCALED_RANGE_LIMIT:
            return policy, ratio
        h.scaling = (f"multigrid hierarchy {policy.name} built in fp64 instead: the matrix's diagonal "
                     f"spans a ratio of {ratio:.3g} (max / min), beyond the {SCALED_RANGE_LIMIT:.2g} a "
                     f"{np.dtype(policy.compute).name} hierarchy holds")
        return FP64, ratio

    def _unit_diagonals(self, low, h: Hierarchy, cur, ratio: float):
        """Where the finest diagonal spreads beyond :func:`diagonal_range_limit` of the compute dtype, every level
        (float64, built) is made unit-diagonal: A_l' = S_l A_l S_l, P_l' = S_l^-1 P_l S_(l+1), R_l' = P_l'^T,
        S_l = diag(a_ii)^-1/2 (the same V-cycle in exact arithmetic, its levels in range). The V-cycle then forms
        z = s (M' (s r)) / sigma with s = sqrt(sigma) S_0, sigma a power of two near the diagonal's geometric middle.
        Returns the coarsest level. ``ratio``: the finest level's (A / scale, whose diagonal spreads as A's)."""
        compute = np.dtype(h.precision.compute)
        mats = self.mats
        if compute == F64 or not ratio > diagonal_range_limit(compute):     # float64 levels hold any diagonal
            return cur
        d0 = host(mats[0][0].diagonal() if mats else cur.diagonal()).astype(F64)
        pos = d0[d0 > 0]
        sigma = 2.0 ** round(0.5 * (math.log2(float(pos.min())) + math.log2(float(pos.max()))))
        diags = [d0] + [host(m[0].diagonal()).astype(F64) for m in mats[1:]] + ([host(cur.diagonal()).astype(F64)]
                                                                               if mats else [])
        s = [np.where(d > 0, 1.0 / np.sqrt(np.where(d > 0, d, 1.0)), 1.0) for d in diags]
        for l, (Al, Pl, kind, Rl) in enumerate(mats):
            Al = layout.scale_rows_cols(Al, s[l], s[l])
            Rl = None if Rl is None else layout.scale_rows_cols(Rl, s[l + 1], 1.0 / s[l])
            mats[l] = (Al, layout.scale_rows_cols(Pl, 1.0 / s[l], s[l + 1]), kind, Rl)
        cur = layout.scale_rows_cols(cur, s[-1], s[-1])
        h.dscale = low.to_device((math.sqrt(sigma) * s[0]).astype(compute))
        h.scale *= sigma
        h.scaling = (f"multigrid levels scaled to a unit diagonal: the matrix's diagonal spans a ratio of {ratio:.3g} "
                     f"(max / min), beyond the {diagonal_range_limit(compute):.2g} a {compute.name} "
                     f"hierarchy holds unscaled")
        return cur

    def _device_levels(self, A, h: Hierarchy, sparse) -> None:
        """h.levels: the operators of ``self.mats`` on the device (CSR or DIA), their Jacobi diagonals and transfers."""
        low, opts, ph = A.low, self.options, self.phases
        storage, compute = np.dtype(h.precision.storage), np.dtype(h.precision.compute)
        fmt = opts.level_format if opts.level_format != "auto" else ("csr" if low.host_resident else "dia")
        for l, (Al, Pl, kind, Rl) in enumerate(self.mats):
            dia = layout.dia_layout(Al, storage) if fmt == "dia" else None
            ph.done("dia layout")
            if l == 0 and storage == compute and h.scale == 1.0 and h.dscale is None and dia is None:   # the solve's own arrays
                op = LevelCSR(A.n, A.n, A.indptr, A.indices, A.ensure(compute), compute)
            else:
                op = layout.upload(low, Al, storage, compute, scaled=unit_rows(h.precision), dia_layout=dia)
            lvl = Level(A=op, dinv=layout.dinv(low, Al, compute), kind=kind)
            ph.done("operators")
            lvl.P = layout.upload(low, Pl, compute, compute)
            # a geometric R = P^T came from a transpose (sorted, no duplicates); an aggregation one is made here
            lvl.R = layout.upload(low, Rl if Rl is not None else canonical(Pl.T.tocsr(), sparse), compute, compute)
            h.levels.append(lvl)
            ph.done("transfers")

    def _coarsest(self, low, h: Hierarchy, cur) -> None:
        """The coarsest level ``cur`` solved by its dense (generalized) inverse, float64 on the host, stored in the
        compute dtype; a CaseError where it is too large for that."""
        opts, nlevels = self.options, len(self.mats)
        # the coarsening stopped above coarse_size with levels to spare: aggregation found nothing to coarsen the
        # last level along. That level is the coarsest, solved directly (the report says why it is so large), or,
        # beyond a dense solve, a CaseError naming the strength threshold
        stalled = cur.shape[0] > opts.coarse_size and nlevels < opts.max_levels - 1
        h.coarsening = self._stall_note(cur.shape[0], nlevels) if stalled else ""
        if cur.shape[0] > DENSE_COARSE_MAX:
            why = f"the coarsest level has {cur.shape[0]:,} unknowns, more than the {DENSE_COARSE_MAX:,} a dense " \
                  "direct solve takes"
            if stalled:
                raise CaseError.invalid(f"{self.field}.strength", opts.strength,
                                        "a lower strength threshold (0: pyamg's default), or the jacobi preconditioner "
                                        "for a matrix with (nearly) no off-diagonal coupling",
                                        why=f"{h.coarsening}; {why}")
            raise CaseError.invalid(f"{self.field}.max_levels", opts.max_levels,
                                    "more levels (or a larger mesh coarsening)", why=why)
        Ac = host_csr(cur)
        inv, h.coarse_rank = coarse_inverse(Ac.toarray())
        h.coarse = layout.dense(low, inv, np.dtype(h.precision.compute))
        h.coarse_rows, h.coarse_nnz = Ac.shape[0], Ac.nnz

    def _stall_note(self, rows: int, level: int) -> str:
        """Why aggregation left level ``level`` (``rows`` unknowns) uncoarsened: no connection as strong as the
        strength threshold (every node isolated, or too few aggregates to shrink the level)."""
        opts = self.options
        theta = opts.strength if opts.amg == "sa" else (opts.strength or 0.25)     # rs: 0 means pyamg's 0.25
        rule = "smoothed aggregation" if opts.amg == "sa" else "Ruge-Stueben coarsening"
        return (f"{rule} could not coarsen level {level} ({rows:,} unknowns) with strength threshold {theta:g} "
                f"({self.field}.strength): too few connections that strong; it is the coarsest level, solved directly")

    def _workspace(self, low, h: Hierarchy) -> None:
        """The V-cycle's vectors: each level's (``cycle.alloc_buffers``) and the coarsest level's, in the compute
        dtype; where the coarsest level is the whole hierarchy, the unit-diagonal scaling's scratch too."""
        compute = np.dtype(h.precision.compute)
        for lvl in h.levels:
            alloc_buffers(low, lvl, compute)
        names = ("b", "x") if h.levels else ("b", "x", "t", "d")
        h.coarse_bufs = {k: low.zeros(h.coarse_rows, compute) for k in names}

    def _smoothers(self, low, h: Hierarchy) -> None:
        """lambda_max(D^-1 A) of every level (on the device together, or on the host for the small levels built
        there) and the smoothing coefficients from it."""
        opts = self.options
        small = self.host_build_rows
        levels = list(enumerate(zip(h.levels, self.mats)))
        on_device = [lvl for l, (lvl, (Al, *_)) in levels if Al.shape[0] > small and l not in self.lambdas]
        for lvl, lam in zip(on_device, lambda_max_levels(low, on_device, opts.power_iterations)):
            lvl.lam = lam
        for l, (lvl, (Al, *_)) in levels:
            if l in self.lambdas:
                lvl.lam = self.lambdas[l]
            elif Al.shape[0] <= small:
                lvl.lam = lambda_max_host(Al, opts.power_iterations)
            lvl.coefs = smoother_coefficients(opts, lvl.lam)


def _diagonal_ratio(A) -> float:
    """max / min of the positive diagonal entries of a prepared matrix (1.0 where there are none), from its 1 / a_ii
    (which spreads as a_ii does; 0 where a_ii <= 0), reduced where the matrix lives: one synchronization, no copy of
    the diagonal to the host (at 4 M unknowns that copy and the host's min / max were 50 ms of a 190 ms set-up)."""
    if A.n == 0:
        return 1.0
    xp, _ = A.low.sparse_modules()
    with A.low.context():
        dinv = from_dev(A.low, A.dinv(F64), xp)
        ends = xp.stack([dinv.max(), xp.where(dinv > 0, dinv, xp.inf).min()])
    hi, lo = (float(v) for v in host(ends))
    return hi / lo if hi > 0 and math.isfinite(lo) else 1.0


def _check_near_nullspace(value, n: int) -> None:
    """A CaseError naming ``near_nullspace`` unless it is a real, finite (n, k) array, k >= 1, without a zero column
    (smoothed aggregation fits its coarse space to these columns: an empty or zero one leaves it nothing to fit)."""
    allowed = f"a finite real ({n}, k) array, k >= 1, no column all zeros (e.g. rigid_body_modes)"
    try:
        B = host(value)
    except Exception as exc:        # any object NumPy cannot make an array of (the message names its type)
        raise CaseError.invalid("near_nullspace", type(value).__name__, allowed,
                                why=f"not an array ({type(exc).__name__})") from None
    if B.dtype.kind not in "biuf":
        raise CaseError.invalid("near_nullspace", f"{B.dtype} entries", allowed, why="not real numbers")
    if B.ndim != 2 or B.shape[0] != n:
        raise CaseError.invalid("near_nullspace", f"shape {B.shape}", allowed, why="one row per unknown of the matrix")
    if B.shape[1] == 0:
        raise CaseError.invalid("near_nullspace", f"shape {B.shape}", allowed, why="no column: nothing to fit")
    if not np.all(np.isfinite(B)):
        raise CaseError.invalid("near_nullspace", "NaN or Inf entries", allowed)
    zero = np.flatnonzero(~np.any(B != 0, axis=0))
    if zero.size:
        raise CaseError.invalid("near_nullspace", f"column {int(zero[0])} all zeros", allowed,
                                why="a zero candidate vector spans nothing")
