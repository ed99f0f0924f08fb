"""Multigrid preconditioners for the one CG of :mod:`hpcsolve.fem.linalg.cg`: geometric ("mg") and algebraic ("amg").

A :class:`Multigrid` is small: its set-up picks the builder of its kind (:data:`BUILDERS`), which returns a
``hierarchy.Hierarchy`` (levels ``A_0 = A, A_1 = R_0 A_0 P_0, ...``, transfers, smoother data, the V-cycle's
vectors, the coarsest level's dense inverse), kept on the prepared matrix for later solves; its ``apply`` is one
V-cycle of that hierarchy (``cycle.precondition``), as pyamg separates a hierarchy's builder from its cycle. The
builders differ only in where the prolongations P come from:

- ``mg`` (``geometric.GeometricBuilder``): nested structured meshes (the rectangle and Cook's-membrane generators
  number their nodes on an (nx+1) x (ny+1) grid). P is P1 interpolation from the grid with half the cells, built on
  the free DOFs only, so the correction is zero on Dirichlet boundaries at every level; several components per node
  (elasticity) interpolate componentwise. When the grid cannot be halved any more (odd cells) and the level is still
  above ``coarse_size``, the remaining levels are aggregation.
- ``amg`` (``aggregation.AggregationBuilder``): smoothed aggregation (``amg = "sa"``, with a near-null space such as
  the rigid-body modes; set up on the device by ``sa_device.DeviceSABuilder`` or by pyamg's pieces on the host by
  ``aggregation.PyamgBuilder``) or classical Ruge-Stueben (``"rs"``, pyamg), for any SPD matrix. A level on which
  the strength threshold (``strength``) leaves no connection to aggregate along becomes the coarsest level (solved
  directly), and where it is too large for that, the set-up raises a CaseError naming ``strength``.

The V-cycle (``cycle.v_cycle``) is written once over the backend's low ops (``csr_apply``, ``mg_smooth``): on each
level ``degree`` Chebyshev (or damped-Jacobi) smoothing steps with the Jacobi diagonal, the residual, the restriction,
recursion, the prolongation added, ``degree`` smoothing steps again. Every step is SpMV-like, launched on the
backend's stream without allocation or synchronization, so a block of preconditioned CG iterations is captured into
one CUDA graph as the unpreconditioned ones are. The pre- and post-smoother are the same polynomial in D^-1 A, so the
V-cycle is symmetric in exact arithmetic; in float32 or 16-bit storage it is only nearly so, and the outer iteration
is flexible CG by default (``flexible``). ``symmetry_defect`` measures |x.My - y.Mx| / (|x| |My|) of the actual
hierarchy.

Hierarchy precision (``hierarchy``, ``mg_options.HIERARCHIES``): "fp64", "fp32" (the default: a preconditioner only
has to be approximately right) or "fp16" (16-bit storage of the level operators, rows scaled to a unit diagonal,
float32 arithmetic). The outer CG converges on the float64 true residual in every case. A matrix whose diagonal
spreads beyond what the hierarchy's dtype holds gets unit-diagonal levels, and beyond
``hierarchy.SCALED_RANGE_LIMIT`` a float64 hierarchy; the report's note says which.
"""

from __future__ import annotations

import math
import time

import numpy as np

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.precond.aggregation import AggregationBuilder
from hpcsolve.fem.linalg.precond.base import Preconditioner
from hpcsolve.fem.linalg.precond.cycle import precondition, start_vector, v_cycle
from hpcsolve.fem.linalg.precond.geometric import GeometricBuilder, StructuredGrid
from hpcsolve.fem.linalg.precond.hierarchy import Hierarchy, HierarchyBuilder
from hpcsolve.fem.linalg.precond.mg_options import F64, MGOptions

# the public face of the multigrid preconditioners
__all__ = ["Multigrid", "BUILDERS"]

#: the hierarchy builder of each multigrid preconditioner, by the name a case or the API gives it
BUILDERS: dict[str, type[HierarchyBuilder]] = {"mg": GeometricBuilder, "amg": AggregationBuilder}

#: the keys of ``Multigrid.info``, in the order the report shows them
INFO_KEYS = ("kind", "hierarchy", "smoother", "degree", "amg", "levels", "rows", "nnz", "level_kinds", "coarse_rank",
             "coarsening", "scaling", "level_formats", "operator_complexity", "grid_complexity", "lambda_max",
             "setup_time_s", "setup_phases_s", "cycles", "setup_kind", "full_setup_time_s", "amg_setup", "flexible",
             "symmetry_defect", "symmetry_check_s", "level_time_s")


class Multigrid(Preconditioner):
    """A V-cycle preconditioner (see the module docstring). ``kind`` "mg" needs ``grid`` (a
    :class:`~hpcsolve.fem.linalg.precond.geometric.StructuredGrid`); ``near_nullspace`` (n x k, host) is smoothed
    aggregation's B (e.g. rigid-body modes of elasticity). ``field``: the name of the options in the set-up's errors
    ("multigrid", the argument of ``hpcsolve.fem.solve``; "solve.multigrid", a case's section)."""

    identity = False
    block = 8              # CG iterations per block at most (each costs a V-cycle; the host checks between)

    def __init__(self, kind: str = "amg", options: "MGOptions | dict | None" = None, *, grid: StructuredGrid | None = None,
                 near_nullspace=None, field: str = "multigrid"):
        if not isinstance(kind, str) or kind.lower() not in BUILDERS:
            raise CaseError.invalid("preconditioner", kind, ", ".join(BUILDERS))
        self.kind = self.name = kind.lower()
        self.builder = BUILDERS[self.name]
        self.field = field
        self.options = options if isinstance(options, MGOptions) else MGOptions.from_dict(options, field, kind=self.name)
        self.grid = grid
        self.near_nullspace = near_nullspace
        if self.builder.needs_grid and grid is None:
            raise CaseError.invalid("preconditioner", self.name, "amg (any matrix), or mg with a structured grid",
                                    why="geometric multigrid needs the structured mesh behind the matrix (the rectangle "
                                        "and cook_membrane generators give it); pass "
                                        "hpcsolve.fem.Multigrid('mg', grid=hpcsolve.fem.StructuredGrid(nx, ny, free)) (free: the indices "
                                        "of the unknowns kept in A among the (nx+1)(ny+1) nodes) or use preconditioner='amg'")
        self.flexible = self.options.flexible
        self.cycles = 0
        self.hierarchy: Hierarchy | None = None
        self._key = ("multigrid", self.name, self.options.key())     # one hierarchy per kind and options

    # ---- what the hierarchy holds, as the report and the tools read it
    @property
    def levels(self) -> list:
        return self.hierarchy.levels if self.hierarchy is not None else []

    @property
    def symmetry_defect(self) -> float:
        return self.hierarchy.symmetry_defect if self.hierarchy is not None else float("nan")

    @property
    def setup_phases_s(self) -> dict:
        return self.hierarchy.setup_phases_s if self.hierarchy is not None else {}

    @property
    def level_time_s(self) -> list:
        return self.hierarchy.level_time_s if self.hierarchy is not None else []

    # ---- set-up
    def setup(self, A) -> None:
        """The hierarchy of A (kept on A for later solves with the same kind and options, for the same grid and
        near-null space objects): the builder of this kind for A's arrays, then the symmetry check."""
        key = self._key
        kept = A.cache.get(key)
        if kept is not None and kept.made_from(self.grid, self.near_nullspace):
            self.hierarchy = kept
            return
        xp, _ = A.low.sparse_modules()
        build = self.builder.choose(self.options, xp)
        builder = build(self.options, grid=self.grid, near_nullspace=self.near_nullspace, field=self.field, key=key)
        builder.check(A)
        if kept is not None:          # another grid or near-null space: the old hierarchy and its engines go
            _forget(A, key, kept)
        h = self.hierarchy = builder.build(A)
        t0 = time.perf_counter()
        h.symmetry_defect = self._symmetry_defect()       # a diagnostic, timed apart from the set-up
        h.symmetry_check_s = time.perf_counter() - t0
        A.cache[key] = h

    def release(self, A) -> None:
        """Forget the hierarchy kept on A (its device memory is freed with the last reference)."""
        if self.hierarchy is not None:
            _forget(A, self._key, self.hierarchy)
            self.hierarchy = None

    # ---- the V-cycle
    def apply(self, r, z, rz=None) -> None:
        """z = M^-1 r (one V-cycle, ``cycle.precondition``) and, with ``rz``, r.z added where the CG wants it;
        launches only (graph-capturable)."""
        h = self.hierarchy
        precondition(h.A.low, h, r, z)
        if rz is not None:
            rz.add(r, z)

    # ---- what the report shows
    def _symmetry_defect(self) -> float:
        """|x.My - y.Mx| / (|x| |My|) for two random vectors, in the hierarchy's precision (float64 sums)."""
        A = self.hierarchy.A
        low = A.low
        x, y = start_vector(low, A.n, 0.0), start_vector(low, A.n, 1.0)   # made on the device
        mx, my = low.zeros(A.n, F64), low.zeros(A.n, F64)
        ws = low.zeros(4, F64)
        self.apply(x, mx)
        self.apply(y, my)
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
        h = self.hierarchy
        low = h.A.low
        out = []
        for l in range(len(h.levels) + 1):        # the last: the coarse solve
            work = (lambda l=l: v_cycle(low, h.levels, h.coarse, h.coarse_bufs["b"], h.coarse_bufs["x"], l,
                                        recurse=False))
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
        h.level_time_s = out
        return out

    def info(self) -> dict:
        """Levels, complexities, set-up time, precision: what SolveReport.preconditioner_info holds."""
        h = self.hierarchy if self.hierarchy is not None else Hierarchy(A=None)
        d = h.info()
        d.update(kind=self.name, hierarchy=self.options.hierarchy, smoother=self.options.smoother,
                 degree=self.options.degree, cycles=self.cycles, flexible=self.flexible)
        return {k: d[k] for k in INFO_KEYS}


def _forget(A, key, h: Hierarchy | None) -> None:
    """Drop the hierarchy kept on A under ``key`` and the CG engines (with their graphs) built around it."""
    A.cache.pop(key, None)
    if h is None:
        return
    for k in [k for k, v in A.cache.items() if isinstance(k, tuple) and k[:1] == ("cg-engine",)
              and getattr(v.precond, "levels", None) is h.levels]:
        del A.cache[k]
