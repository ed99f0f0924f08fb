"""Multigrid preconditioners for the one CG of :mod:`hpcsolve.fem.linalg.cg`: geometric ("mg") and algebraic ("amg").

A hierarchy is a list of levels ``A_0 = A, A_1 = R_0 A_0 P_0, ...`` (Galerkin coarse operators, R = P^T)
and a coarsest level solved directly (its dense inverse, applied as one matrix-vector product on the
device). A coarsest level that is singular or only semidefinite (a Neumann problem's constants, an
aggregate whose candidates vanish) gets a generalized inverse instead (``aggregation.coarse_inverse``, a
pivoted Cholesky factorization that stops at the level's rank): the correction is exact on the
level's range. The two kinds differ only in where the prolongations P come from:

- ``mg``: nested structured meshes (the rectangle and Cook's-membrane generators number their nodes
  on an (nx+1) x (ny+1) grid). P is P1 interpolation from the grid with half the cells: a fine node
  takes the mean of the two coarse nodes at the ends of the coarse edge it halves (the (/) diagonal
  included), a node that is also coarse takes its value. P is built on the free DOFs only: a coarse
  node that is fixed (Dirichlet) on the fine level is fixed on the coarse one, so the correction is
  zero there and Dirichlet rows stay consistent on every level. Several components per node
  (elasticity) interpolate componentwise. When the grid cannot be halved any more (odd cells) and the
  level is still above ``coarse_size``, the remaining levels are aggregation (pyamg).
- ``amg``: smoothed aggregation (``amg = "sa"``, with a near-null space such as the rigid-body modes)
  or classical Ruge-Stueben (``"rs"``) from pyamg, for any SPD matrix (file meshes, the
  ``hpcsolve.fem.solve`` API). A level on which the strength threshold (``strength``) leaves no
  connection to aggregate or coarsen along cannot be coarsened: it becomes the coarsest level
  (solved directly), and where it is too large for that, the set-up raises a CaseError naming
  ``strength``.

The V-cycle (``Multigrid.apply``) is written once over the backend's low ops (``csr_apply``,
``mg_smooth``): on each level ``degree`` Chebyshev (or damped-Jacobi) smoothing steps with the Jacobi
diagonal, the residual, the restriction, recursion, the prolongation added, ``degree`` smoothing
steps again. Every step is SpMV-like, launched on the backend's stream without allocation or
synchronization, so a block of preconditioned CG iterations is captured into one CUDA graph as the
unpreconditioned ones are. The pre- and post-smoother are the same polynomial in D^-1 A, so the
V-cycle is symmetric in exact arithmetic; in float32 or 16-bit storage it is only nearly so, and the
outer iteration is flexible CG by default (``flexible``), whose beta = -z.Aq / p.Aq does not assume a
symmetric M. ``symmetry_defect`` measures |x.My - y.Mx| / (|x| |My|) of the actual hierarchy.

Hierarchy precision (``hierarchy``): "fp64", "fp32" (the default: a preconditioner only has to be
approximately right) or "fp16" (16-bit storage of the level operators, rows scaled to a unit diagonal,
float32 arithmetic). The outer CG converges on the float64 true residual in every case. A matrix whose diagonal
spreads beyond what the hierarchy's dtype holds (max / min a_ii above sqrt(float32 max), a conductivity contrast of
1e20 or more) gets unit-diagonal levels (``_unit_diagonals``: the same V-cycle in exact arithmetic, built in float64
and scaled before the cast), and beyond ``SCALED_RANGE_LIMIT`` a float64 hierarchy; the report's note says which.

This module is the preconditioner (:class:`Multigrid`: set-up orchestration, the cache on the matrix, ``apply``,
the report); the pieces live beside it by job: ``mg_options`` (:class:`MGOptions`, precisions), ``geometric``
(:class:`StructuredGrid`, P1 prolongation, Galerkin by probing), ``aggregation`` (pyamg levels, the strength
threshold, :func:`rigid_body_modes`, the coarsest level's ``coarse_inverse``), ``layout`` (levels on the device:
CSR or DIA, dense, Jacobi diagonal) and ``cycle`` (levels, smoothers, the V-cycle).
"""

from __future__ import annotations

import math
import time

import numpy as np
import scipy.sparse as sp

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.kernels_numpy_low import low_ops as host_low_ops
from hpcsolve.fem.linalg.lowops import LevelCSR
from hpcsolve.fem.linalg.precond import layout
from hpcsolve.fem.linalg.precond.aggregation import DENSE_COARSE_MAX, coarse_inverse, pyamg_levels
from hpcsolve.fem.linalg.precond.base import Preconditioner
from hpcsolve.fem.linalg.precond.cycle import (Level, alloc_buffers, final_slot, lambda_max_host, lambda_max_levels,
                                               smoother_coefficients, start_vector, v_cycle)
from hpcsolve.fem.linalg.precond.geometric import StructuredGrid, coarse_rows_in_fine, galerkin_by_probing, \
    geometric_prolongation
from hpcsolve.fem.linalg.precond.layout import canonical, from_dev, host, host_csr
from hpcsolve.fem.linalg.precond.mg_options import F16, F64, HIERARCHIES, KINDS, MGOptions
from hpcsolve.fem.linalg.precond.sa_device import sa_levels_xp

# the public face of the multigrid preconditioners: the class, its options, the structured grid "mg" needs and the
# near-null space of elasticity that "amg" takes
__all__ = ["Multigrid"]

HOST_BUILD_ROWS = 1 << 12   # a level this small is built on the host: on a GPU its set-up is launches, not work
HOST_PRODUCTS_ROWS = 1 << 17  # a hierarchy built on the host (Numba) runs its probe products on the host below this


def diagonal_range_limit(compute) -> float:
    """The largest max / min of a matrix's positive diagonal that a hierarchy computing in ``compute`` takes as it
    stands: sqrt of the dtype's largest number (1.8e19 for float32). Beyond it a_ii and 1 / a_ii of one level leave
    the dtype's range together (1e40 coefficient contrasts broke the float32 V-cycle with NaN)."""
    return math.sqrt(float(np.finfo(compute).max))


#: beyond this max / min of the diagonal even the unit-diagonal levels' transfers (entries up to the ratio's square
#: root) and scales leave float32: such a hierarchy is built in float64 instead (with a note)
SCALED_RANGE_LIMIT = 1e64


class _Phases:
    """Wall seconds of the set-up's phases (the device synchronized at each phase's end), summed by name."""

    def __init__(self, low):
        self.low, self.seconds, self._t = low, {}, time.perf_counter()

    def done(self, name: str) -> None:
        self.low.sync()
        t = time.perf_counter()
        self.seconds[name] = self.seconds.get(name, 0.0) + (t - self._t)
        self._t = t



class Multigrid(Preconditioner):
    """A V-cycle preconditioner (see the module docstring). ``kind`` "mg" needs ``grid`` (a
    :class:`StructuredGrid`); ``near_nullspace`` (n x k, host) is smoothed aggregation's B (e.g. rigid-body
    modes of elasticity). ``field``: the name of the options in the set-up's errors ("multigrid", the
    argument of ``hpcsolve.fem.solve``; "solve.multigrid", a case's section)."""

    identity = False
    block = 8              # CG iterations per block at most (each costs a V-cycle; the host checks between)

    def __init__(self, kind: str = "amg", options: "MGOptions | dict | None" = None, *, grid: StructuredGrid | None = None,
                 near_nullspace=None, field: str = "multigrid"):
        if not isinstance(kind, str) or kind.lower() not in KINDS:
            raise CaseError.invalid("preconditioner", kind, ", ".join(KINDS))
        self.kind = self.name = kind.lower()
        self.field = field
        self.options = options if isinstance(options, MGOptions) else MGOptions.from_dict(options, field)
        self.grid = grid
        self.near_nullspace = near_nullspace
        if self.kind == "mg" and grid is None:
            raise CaseError.invalid("preconditioner", "mg", "amg (any matrix), or mg with a structured grid",
                                    why="geometric multigrid needs the structured mesh behind the matrix (the rectangle "
                                        "and cook_membrane generators give it); pass "
                                        "hpcsolve.fem.Multigrid('mg', grid=hpcsolve.fem.StructuredGrid(nx, ny, free)) (free: the indices "
                                        "of the unknowns kept in A among the (nx+1)(ny+1) nodes) or use preconditioner='amg'")
        self.flexible = self.options.flexible
        self.levels: list[Level] = []
        self.coarse: LevelCSR | None = None
        self.setup_time_s = 0.0
        self.setup_phases_s: dict[str, float] = {}
        self.symmetry_defect = float("nan")
        self.symmetry_check_s = 0.0
        self.cycles = 0
        self.level_time_s: list[float] = []
        self._A = None
        self._scale = 1.0
        self._dscale = None        # unit-diagonal hierarchy: sqrt(sigma / a_ii) of the finest level (compute dtype)
        self.scaling = ""          # the note saying so (or that the hierarchy went to float64)
        self._coarse_rank = 0
        self.coarsening = ""
        self.setup_kind = ""               # "full", or "numeric" (a values-only update: the aggregates reused)
        self.full_setup_time_s = float("nan")   # the full set-up's seconds (where this one was numeric: the earlier)
        self.amg_setup = ""                # where the aggregation levels were set up: device (sa_device) | pyamg

    # ---- set-up
    def setup(self, A) -> None:
        """Build the hierarchy on A's device (kept on A for later solves with the same options)."""
        # the cached entry holds the grid and near-null space themselves: a hit must be for these very objects
        key = self._key = ("multigrid", self.kind, self.options.key())     # one hierarchy per kind and options
        hit = A.cache.get(key)
        if hit is not None and hit["_grid"] is self.grid and hit["_nns"] is self.near_nullspace:
            self.__dict__.update({k: v for k, v in hit.items() if not k.startswith("_grid") and k != "_nns"})
            return
        self._check_grid(A)
        if hit is not None:           # another grid or near-null space: the old hierarchy and its engines go
            old = Multigrid.__new__(Multigrid)
            old.__dict__.update(hit, _key=key)
            old.release(A)
        t0 = time.perf_counter()
        self._A = A
        self.setup_kind, self.full_setup_time_s, self.amg_setup = "full", float("nan"), ""
        with A.low.context():       # CuPy set-up work on the stream of the kernels it feeds (no races)
            self._build(A)
        A.low.sync()
        self.setup_time_s = time.perf_counter() - t0
        if self.setup_kind == "full":
            self.full_setup_time_s = self.setup_time_s
            kept = A.cache.get(("structure",) + key)
            if kept is not None:
                kept["full_setup_time_s"] = self.setup_time_s
        t0 = time.perf_counter()
        self.symmetry_defect = self._symmetry_defect()       # a diagnostic, timed apart from the set-up
        self.symmetry_check_s = time.perf_counter() - t0
        A.cache[key] = {k: self.__dict__[k] for k in ("levels", "coarse", "setup_time_s", "setup_phases_s",
                                                      "symmetry_defect", "_A",
                                                      "level_time_s", "symmetry_check_s", "_scale",
                                                      "_coarse_rows", "_coarse_nnz", "_coarse_rank", "_coarse_b",
                                                      "_coarse_x", "_coarse_t", "_coarse_d", "coarsening", "_dscale", "scaling",
                                                      "setup_kind", "full_setup_time_s", "amg_setup")}
        A.cache[key].update(_grid=self.grid, _nns=self.near_nullspace)

    def _check_grid(self, A) -> None:
        """The grid (and near-null space) must describe A's unknowns; a CaseError names what does not fit."""
        if self.near_nullspace is not None:
            _check_near_nullspace(self.near_nullspace, A.n)
        if self.kind != "mg":
            return
        g = self.grid
        if g.nx < 1 or g.ny < 1 or g.ncomp < 1:
            raise CaseError.invalid("grid", (g.nx, g.ny, g.ncomp), "nx, ny, ncomp >= 1")
        n = (g.nx - 1) * (g.ny - 1) * g.ncomp if g.free is None else int(np.size(g.free))
        if g.free is None:
            top = g.n_full - 1
        elif hasattr(g.free, "max"):        # NumPy or CuPy: reduced where it lives (no 33 MB copy at 4 M unknowns)
            top = int(g.free.max()) if n else -1
        else:
            top = int(host(g.free).max(initial=-1))
        if n != A.n or top >= g.n_full:
            raise CaseError.invalid("grid", f"{g.nx} x {g.ny} cells, {g.ncomp} per node, {n} free unknowns",
                                    f"a grid whose free unknowns are the {A.n} rows of the matrix",
                                    why="geometric multigrid interpolates on this grid")

    def _build(self, A) -> None:
        """The hierarchy on A's device: geometric levels while the grid halves, aggregation below them, the levels
        uploaded in their storage format, the coarsest level's dense inverse, buffers and smoothers."""
        low = A.low
        opts = self.options
        storage, compute = HIERARCHIES[opts.hierarchy]
        storage, compute = self._range_fallback(A, storage, compute)
        ph = _Phases(low)
        cur = self._fine_matrix(A)
        nns = None if self.near_nullspace is None else np.asarray(self.near_nullspace, dtype=np.float64)
        ph.done("matrix")
        mats: list = []       # (A_l, P_l, kind, R_l or None) in float64, SciPy or CuPy sparse
        cur, nns, xp, sparse = self._geometric_levels(low, cur, nns, mats, ph)
        if cur.shape[0] > opts.coarse_size and len(mats) < opts.max_levels - 1:
            # aggregation from here on; the near-null space applies on the finest level only
            cur = self._aggregation_levels(A, cur, nns, mats, xp, sparse)
            ph.done("aggregation")
        cur = self._unit_diagonals(low, mats, cur, compute)
        ph.done("unit diagonals")
        self._device_levels(A, mats, sparse, storage, compute, ph)
        self._coarsest(low, cur, len(mats), compute)
        ph.done("coarse inverse")
        for lvl in self.levels:
            alloc_buffers(low, lvl, compute)
        self._coarse_b = low.zeros(self._coarse_rows, compute)
        self._coarse_x = low.zeros(self._coarse_rows, compute)
        # the unit-diagonal scaling's scratch where the coarsest level is the whole hierarchy
        self._coarse_t = low.zeros(self._coarse_rows, compute) if not self.levels else None
        self._coarse_d = low.zeros(self._coarse_rows, compute) if not self.levels else None
        ph.done("buffers")
        on_device = [lvl for lvl, (Al, *_) in zip(self.levels, mats) if Al.shape[0] > HOST_BUILD_ROWS]
        for lvl, lam in zip(on_device, lambda_max_levels(low, on_device, opts.power_iterations)):
            lvl.lam = lam
        for lvl, (Al, *_) in zip(self.levels, mats):
            if Al.shape[0] <= HOST_BUILD_ROWS:
                lvl.lam = lambda_max_host(Al, opts.power_iterations)
            lvl.coefs = smoother_coefficients(opts, lvl.lam)
        ph.done("lambda_max")
        self.setup_phases_s = ph.seconds

    def _device_setup(self, xp) -> bool:
        """Smoothed aggregation by :mod:`sa_device` (with ``xp``) rather than by pyamg's pieces on the host."""
        opts = self.options
        return opts.amg == "sa" and (opts.amg_setup == "device" or (opts.amg_setup == "auto" and xp is not np))

    def _aggregation_levels(self, A, cur, nns, mats: list, xp, sparse):
        """Append the aggregation levels below ``cur`` to ``mats``; returns the coarsest level. Smoothed aggregation
        on the device (:func:`sa_device.sa_levels_xp`) keeps its aggregates on A (key ("structure", ...), which a
        values-only update of A keeps): a later set-up of A with new values reuses them (numeric part only)."""
        opts = self.options
        left = opts.max_levels - len(mats)
        self.amg_setup = "device" if self._device_setup(xp) else "pyamg"
        if self.amg_setup == "pyamg":
            pairs, cur = pyamg_levels(host_csr(cur), opts, nns, left)
            for Al, Pl in pairs:
                Al, Pl = canonical(sp.csr_matrix(Al), sp), canonical(sp.csr_matrix(Pl), sp)
                if xp is not np:
                    Al, Pl = sparse.csr_matrix(Al), sparse.csr_matrix(Pl)
                mats.append((Al, Pl, "aggregation", None))
            return cur
        skey = ("structure",) + self._key
        kept = A.cache.get(skey)
        if kept is not None and (kept["grid"] is not self.grid or kept["nns"] is not self.near_nullspace):
            kept = None
        B = None if nns is None else xp.asarray(nns)
        pairs, cur, structure = sa_levels_xp(cur, opts, B, left, xp, sparse,
                                             structure=None if kept is None else kept["structure"])
        for Al, Pl in pairs:
            mats.append((canonical(Al, sparse), canonical(Pl, sparse), "aggregation", None))
        if kept is None:
            A.cache[skey] = {"structure": structure, "grid": self.grid, "nns": self.near_nullspace,
                             "full_setup_time_s": float("nan")}
            self.setup_kind = "full"
        else:
            self.setup_kind = "numeric"
            self.full_setup_time_s = kept["full_setup_time_s"]
        return cur

    def _fine_matrix(self, A):
        """A in float64 as a SciPy (NumPy backends) or CuPy sparse matrix, divided by ``self._scale``."""
        low = A.low
        xp, sparse = low.sparse_modules()
        # a matrix outside [1e-20, 1e20] is built as A / s, s a power of two near max a_ii, so that float32 and
        # 16-bit levels hold any matrix float64 can (M(A) = M(A / s) / s: apply() scales z back)
        d = A.max_diag
        self._scale = 2.0 ** round(math.log2(d)) if d > 0 and math.isfinite(d) and not 1e-20 <= d <= 1e20 else 1.0
        if xp is np:
            cur = A.to_scipy() if not low.host_resident else sp.csr_matrix((A.vals[F64], A.indices, A.indptr), shape=A.shape)
        else:
            # the solve's own arrays (Numba-CUDA's seen by CuPy through the CUDA array interface)
            cur = sparse.csr_matrix((from_dev(low, A.vals[F64], xp), from_dev(low, A.indices, xp),
                                     from_dev(low, A.indptr, xp)), shape=A.shape)
        if self._scale != 1.0:
            cur = cur * (1.0 / self._scale)     # a new matrix; A itself is untouched
        return cur

    def _range_fallback(self, A, storage, compute):
        """(storage, compute) of the hierarchy: float64 with a note where A's diagonal spreads beyond what even a
        unit-diagonal float32 hierarchy holds (``SCALED_RANGE_LIMIT``), else those of the options."""
        self.scaling, self._dscale, self._diag_ratio = "", None, 1.0
        if compute == F64:
            return storage, compute
        ratio = self._diag_ratio = _diagonal_ratio(A)
        limit = SCALED_RANGE_LIMIT
        if not ratio > limit:
            return storage, compute
        self.scaling = (f"multigrid hierarchy {self.options.hierarchy} built in fp64 instead: the matrix's diagonal "
                        f"spans a ratio of {ratio:.3g} (max / min), beyond the {limit:.2g} a "
                        f"{np.dtype(compute).name} hierarchy holds")
        return F64, F64

    def _unit_diagonals(self, low, mats: list, cur, compute):
        """Where the finest diagonal spreads beyond :func:`diagonal_range_limit` of ``compute``, every level (float64,
        built) is made unit-diagonal: A_l' = S_l A_l S_l, P_l' = S_l^-1 P_l S_(l+1), R_l' = P_l'^T, S_l = diag(a_ii)^-1/2
        (the same V-cycle in exact arithmetic, its levels in range). ``apply`` then forms z = s (M' (s r)) / sigma with
        s = sqrt(sigma) S_0, sigma a power of two near the diagonal's geometric middle. Returns the coarsest level."""
        ratio = self._diag_ratio        # the finest level's: A / scale, whose diagonal spreads as A's (_range_fallback)
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
        self._dscale = low.to_device((math.sqrt(sigma) * s[0]).astype(compute))
        self._scale *= sigma
        self.scaling = (f"multigrid levels scaled to a unit diagonal: the matrix's diagonal spans a ratio of {ratio:.3g} "
                        f"(max / min), beyond the {diagonal_range_limit(compute):.2g} a {np.dtype(compute).name} "
                        f"hierarchy holds unscaled")
        return cur

    def _geometric_levels(self, low, cur, nns, mats: list, ph):
        """Append (A_l, P_l, "geometric", R_l) to ``mats`` while the grid halves and the level is above
        coarse_size; small levels move to the host. Returns (the next level's matrix, its near-null space, the
        array and sparse modules it is in)."""
        opts = self.options
        xp, sparse = low.sparse_modules()
        grid = self.grid if self.kind == "mg" else None
        plow = low            # where the Galerkin products run
        while grid is not None and grid.halvable() and cur.shape[0] > opts.coarse_size \
                and len(mats) < opts.max_levels - 1:
            small = HOST_BUILD_ROWS if xp is not np else HOST_PRODUCTS_ROWS
            if cur.shape[0] <= small and not plow.host_resident:     # the small levels: on the host
                xp, sparse, plow = np, sp, host_low_ops()
                cur = host_csr(cur)
                grid = StructuredGrid(grid.nx, grid.ny, None if grid.free is None else host(grid.free), grid.ncomp)
            P, cgrid, cindex = geometric_prolongation(grid, xp, sparse)
            if P.shape[1] == 0 or P.shape[1] >= P.shape[0]:
                break
            if nns is not None:           # coarse DOFs are fine DOFs (2I, 2J): the near-null space by injection
                nns = nns[host(coarse_rows_in_fine(grid, cgrid, xp))]
            R = P.T.tocsr()
            mats.append((cur, P, "geometric", R))
            ph.done("prolongation")
            cur = galerkin_by_probing(plow, cur, P, R, cgrid, cindex, xp, sparse)
            ph.done("galerkin")
            grid = cgrid
        return cur, nns, xp, sparse

    def _device_levels(self, A, mats: list, sparse, storage, compute, ph) -> None:
        """self.levels: the operators of ``mats`` on the device (CSR or DIA), their Jacobi diagonals and transfers."""
        low = A.low
        opts = self.options
        self.levels = []
        fmt = opts.level_format if opts.level_format != "auto" else ("csr" if low.host_resident else "dia")
        for l, (Al, Pl, kind, Rl) in enumerate(mats):
            dia = layout.dia_layout(Al, storage) if fmt == "dia" else None
            ph.done("dia layout")
            if l == 0 and storage == compute and self._scale == 1.0 and self._dscale is None and dia is None:   # the solve's own arrays
                op = LevelCSR(A.n, A.n, A.indptr, A.indices, A.ensure(compute), compute)
            else:
                op = layout.upload(low, Al, storage, compute, scaled=storage == F16, dia_layout=dia)
            lvl = Level(A=op, dinv=layout.dinv(low, Al, compute), kind=kind)
            ph.done("operators")
            lvl.P = layout.upload(low, Pl, compute, compute)
            # a geometric R = P^T came from a transpose (sorted, no duplicates); an aggregation one is made here
            lvl.R = layout.upload(low, Rl if Rl is not None else canonical(Pl.T.tocsr(), sparse), compute, compute)
            self.levels.append(lvl)
            ph.done("transfers")

    def _coarsest(self, low, cur, nlevels: int, compute) -> None:
        """The coarsest level ``cur`` (below ``nlevels`` levels) solved by its dense (generalized) inverse, float64 on
        the host, stored in the compute dtype; a CaseError where it is too large for that."""
        opts = self.options
        # the coarsening stopped above coarse_size with levels to spare: aggregation found nothing to coarsen the
        # last level along. That level is the coarsest, solved directly (the report says why it is so large), or,
        # beyond a dense solve, a CaseError naming the strength threshold
        stalled = cur.shape[0] > opts.coarse_size and nlevels < opts.max_levels - 1
        self.coarsening = self._stall_note(cur.shape[0], nlevels) if stalled else ""
        if cur.shape[0] > DENSE_COARSE_MAX:
            why = f"the coarsest level has {cur.shape[0]:,} unknowns, more than the {DENSE_COARSE_MAX:,} a dense " \
                  "direct solve takes"
            if stalled:
                raise CaseError.invalid(f"{self.field}.strength", opts.strength,
                                        "a lower strength threshold (0: pyamg's default), or the jacobi preconditioner "
                                        "for a matrix with (nearly) no off-diagonal coupling",
                                        why=f"{self.coarsening}; {why}")
            raise CaseError.invalid(f"{self.field}.max_levels", opts.max_levels,
                                    "more levels (or a larger mesh coarsening)", why=why)
        Ac = host_csr(cur)
        inv, self._coarse_rank = coarse_inverse(Ac.toarray())
        self.coarse = layout.dense(low, inv, compute)
        self._coarse_rows, self._coarse_nnz = Ac.shape[0], Ac.nnz

    def _stall_note(self, rows: int, level: int) -> str:
        """Why aggregation left level ``level`` (``rows`` unknowns) uncoarsened: no connection as strong as the
        strength threshold (every node isolated, or too few aggregates to shrink the level)."""
        opts = self.options
        theta = opts.strength if opts.amg == "sa" else (opts.strength or 0.25)     # rs: 0 means pyamg's 0.25
        rule = "smoothed aggregation" if opts.amg == "sa" else "Ruge-Stueben coarsening"
        return (f"{rule} could not coarsen level {level} ({rows:,} unknowns) with strength threshold {theta:g} "
                f"({self.field}.strength): too few connections that strong; it is the coarsest level, solved directly")

    def release(self, A) -> None:
        """Forget the hierarchy kept on A (its device memory is freed with the last reference)."""
        A.cache.pop(getattr(self, "_key", None), None)
        for k in [k for k, v in A.cache.items() if isinstance(k, tuple) and k[:1] == ("cg-engine",)
                  and getattr(v.precond, "levels", None) is self.levels]:
            del A.cache[k]          # the CG engines (and graphs) built around this hierarchy
        self.levels, self.coarse, self._A = [], None, None


    # ---- the V-cycle
    def _cycle(self, low, l: int, recurse: bool = True) -> None:
        """x of level l ~ A_l^-1 b_l (:func:`~hpcsolve.fem.linalg.precond.cycle.v_cycle` on this hierarchy)."""
        v_cycle(low, self.levels, self.coarse, self._coarse_b, self._coarse_x, l, recurse)

    def apply(self, low, A, r, z, ws, i_rz) -> None:
        """z = M^-1 r (one V-cycle) and ws[i_rz] += r.z; launches only (graph-capturable). A unit-diagonal
        hierarchy (``_dscale``) takes s r and gives back s x: two more elementwise launches on the device."""
        if not self.levels:
            b, x, t, d, M = self._coarse_b, self._coarse_x, self._coarse_t, self._coarse_d, self.coarse
        else:
            top = self.levels[0].bufs
            b, x, t, d, M = top["b"], top[f"x{final_slot(self.levels)}"], top["r"], top["d"], self.levels[0].A
        if self._dscale is None:
            low.scale_copy(r, b, 1.0)
        else:                       # b = s r: r cast into the scratch t, then the product (mg_smooth's first step)
            low.scale_copy(r, t, 1.0)
            low.mg_smooth(M, None, t, self._dscale, d, b, 0.0, 1.0, True)
        if not self.levels:
            low.csr_apply(self.coarse, b, x)
        else:
            self._cycle(low, 0)
        if self._dscale is not None:    # x = s x, through the scratch t
            low.mg_smooth(M, None, x, self._dscale, d, t, 0.0, 1.0, True)
            x = t
        low.scale_copy(x, z, 1.0 / self._scale)
        if i_rz >= 0:
            low.dot(r, z, ws, i_rz)

    # ---- what the report shows
    def _symmetry_defect(self) -> float:
        """|x.My - y.Mx| / (|x| |My|) for two random vectors, in the hierarchy's precision (float64 sums)."""
        A = self._A
        low = A.low
        x, y = start_vector(low, A.n, 0.0), start_vector(low, A.n, 1.0)   # made on the device
        mx, my = low.zeros(A.n, F64), low.zeros(A.n, F64)
        ws = low.zeros(4, F64)
        self.apply(low, A, x, mx, ws, -1)
        self.apply(low, A, y, my, ws, -1)
        low.dot(x, my, ws, 0)
        low.dot(y, mx, ws, 1)
        low.dot(x, x, ws, 2)
        low.dot(my, my, ws, 3)
        h = low.to_host(ws)
        den = math.sqrt(max(h[2], 0.0) * max(h[3], 0.0))
        return abs(h[0] - h[1]) / den if den > 0 else float("nan")

    def time_levels(self, repeat: int = 5, replays: int = 10) -> list[float]:
        """Median device time of one V-cycle's work on each level (smoothing, residual, transfers), and the
        coarse solve last. Where the backend records CUDA graphs, each level's work is captured into a graph and
        timed over ``replays`` replays, as it runs inside a solve; otherwise its launches are timed one by one."""
        A = self._A
        low = A.low
        out = []
        for l in range(len(self.levels) + 1):        # the last: the coarse solve
            work = (lambda l=l: self._cycle(low, l, recurse=False))
            work()                                   # compiled and warm before any capture
            graph = low.capture(work) if low.graphs else None
            run, per = (graph, replays) if graph is not None else (work, 1)
            ts = []
            for _ in range(repeat):
                with low.timer() as t:
                    for _ in range(per):
                        run()
                ts.append(t.seconds / per)
            out.append(float(np.median(ts)))
        self.level_time_s = out
        return out

    def info(self) -> dict:
        """Levels, complexities, set-up time, precision: what SolveReport.preconditioner_info holds."""
        rows = [lvl.A.rows for lvl in self.levels] + [self._coarse_rows]
        nnz = [lvl.A.nnz for lvl in self.levels] + [self._coarse_nnz]
        return {
            "kind": self.kind, "hierarchy": self.options.hierarchy, "smoother": self.options.smoother,
            "degree": self.options.degree, "amg": self.options.amg if (self.kind == "amg" or any(
                lvl.kind == "aggregation" for lvl in self.levels)) else "",
            "levels": len(rows), "rows": rows, "nnz": nnz,
            "level_kinds": [lvl.kind for lvl in self.levels] + ["direct"],
            # the coarsest level's numerical rank: below its rows where it is singular (coarse_inverse)
            "coarse_rank": self._coarse_rank,
            "coarsening": self.coarsening,     # why the coarsest level is above coarse_size ("": it is not)
            "scaling": self.scaling,           # unit-diagonal levels or a float64 hierarchy, and why ("": neither)
            "level_formats": [lvl.A.format for lvl in self.levels] + ["dense"],
            "operator_complexity": float(sum(nnz) / nnz[0]) if nnz and nnz[0] else float("nan"),
            "grid_complexity": float(sum(rows) / rows[0]) if rows and rows[0] else float("nan"),
            "lambda_max": [lvl.lam for lvl in self.levels],
            "setup_time_s": self.setup_time_s, "setup_phases_s": dict(self.setup_phases_s), "cycles": self.cycles,
            "setup_kind": self.setup_kind, "full_setup_time_s": self.full_setup_time_s,
            "amg_setup": self.amg_setup,       # where the aggregation levels were set up: device | pyamg | ""
            "flexible": self.flexible, "symmetry_defect": self.symmetry_defect,
            "symmetry_check_s": self.symmetry_check_s,
            "level_time_s": list(self.level_time_s),
        }


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
