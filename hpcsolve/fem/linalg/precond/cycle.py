"""The V-cycle of the multigrid preconditioners, written once over the backend's low ops (``csr_apply``,
``mg_smooth``): the levels (:class:`Level`), their smoothers (Chebyshev or damped Jacobi in D^-1 A, with
lambda_max(D^-1 A) from a power iteration) and one cycle (:func:`v_cycle`). Every step launches on the low ops'
stream without allocation or synchronization, so a V-cycle can be captured into a CUDA graph."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hpcsolve.fem.linalg.lowops import LevelCSR
from hpcsolve.fem.linalg.precond.layout import dev, host_csr
from hpcsolve.fem.linalg.precond.mg_options import F64, MGOptions


@dataclass
class Level:
    A: LevelCSR                      # the level operator (storage precision)
    dinv: object                     # 1 / diag(A_l) in the compute dtype
    P: LevelCSR | None = None        # to the next level (None on the coarsest)
    R: LevelCSR | None = None
    lam: float = float("nan")        # lambda_max(D^-1 A_l) estimate
    coefs: list = field(default_factory=list)   # smoothing steps [(c_d, c_r), ...]
    kind: str = "geometric"          # geometric | aggregation | coarse
    bufs: dict = field(default_factory=dict)    # b, x0, x1, d, r (compute dtype)


# --------------------------------------------------------------------------- smoothers
def alloc_buffers(low, lvl: Level, compute) -> None:
    """The V-cycle's vectors of a level: b, x0, x1, d, r in the compute dtype."""
    n = lvl.A.rows
    lvl.bufs = {k: low.zeros(n, compute) for k in ("b", "x0", "x1", "d", "r")}


def start_vector(low, n: int, shift: float = 0.0):
    """sin(12.9898 i + 78.233 + 37.719 shift): deterministic, rough (every frequency present), built on
    the device (a host random vector of 16.7M entries cost 0.3 s of set-up)."""
    with low.context():
        xp, _ = low.sparse_modules()
        v = xp.sin(xp.arange(n, dtype=xp.float64) * 12.9898 + (78.233 + 37.719 * shift)).astype(F64)
    return dev(low, v, xp)


#: the device power iteration normalizes its vector every this many steps and around its last step (the estimate is
#: the last step's growth from a unit vector, as on the host); every normalization is a host synchronization
NORMALIZE_EVERY = 5


def lambda_max(low, lvl: Level, iterations: int) -> float:
    """lambda_max(D^-1 A) of one level by :func:`lambda_max_levels`."""
    return lambda_max_levels(low, [lvl], iterations)[0]


def lambda_max_levels(low, levels: list, iterations: int) -> list[float]:
    """lambda_max(D^-1 A) of each level by power iteration on the device: the estimate of :func:`lambda_max_host`
    (the growth of the last step from a unit vector) with the vector normalized only every ``NORMALIZE_EVERY``
    steps and before the last one. A step is one smoothing launch with b = 0 and weights (0, -1), whose d is
    D^-1 A x (the operator the smoothers apply); the level's buffers take turns. The levels go together: each
    normalization is one host synchronization for all of them (4 for 15 steps, whatever the number of levels), and
    every level and normalization has a float64 slot of its own (no zeroing launch between)."""
    if not levels:
        return []
    twin = low.launch_twin()           # launch-bound: the cheapest launches on this stream (Numba: CuPy's)
    if twin is not None:
        low, view = twin
        levels = [_level_view(lvl, view) for lvl in levels]
    points = [k for k in range(1, iterations + 1) if k % NORMALIZE_EVERY == 0 or k >= iterations - 1]
    ws = low.zeros(len(points) * len(levels), F64)
    for lvl in levels:
        for name in ("b", "x1"):         # b = 0; x1: its first d, which the step scales by 0 (no stale NaN may stay)
            low.fill_zero(lvl.bufs[name])
        low.scale_copy(start_vector(low, lvl.A.rows), lvl.bufs["x0"], 1.0)    # a fixed rough start, on the device
    cur, lam, live = [0] * len(levels), [0.0] * len(levels), [True] * len(levels)
    done = 0
    for p, point in enumerate(points):
        since = point - done
        for l, lvl in enumerate(levels):
            if not live[l]:
                continue
            B = lvl.bufs
            for _ in range(since):
                src, dst = B[f"x{cur[l]}"], B[f"x{1 - cur[l]}"]
                low.mg_smooth(lvl.A, src, B["b"], lvl.dinv, dst, B["r"], 0.0, -1.0, False)   # dst = D^-1 A src
                cur[l] = 1 - cur[l]
            low.dot(B[f"x{cur[l]}"], B[f"x{cur[l]}"], ws, p * len(levels) + l)
        norms = low.to_host(ws)[p * len(levels):(p + 1) * len(levels)]
        for l, lvl in enumerate(levels):
            nrm = math.sqrt(max(float(norms[l]), 0.0))
            if not live[l] or not nrm > 0 or not math.isfinite(nrm):
                live[l] = False
                continue
            if since == 1:                         # the growth of one step from a unit vector: the estimate
                lam[l] = nrm
            B = lvl.bufs
            low.scale_copy(B[f"x{cur[l]}"], B[f"x{1 - cur[l]}"], 1.0 / nrm)
            cur[l] = 1 - cur[l]                    # the normalized vector
        done = point
    return [float(v) for v in lam]


def _level_view(lvl: Level, view) -> Level:
    """What the power iteration reads and writes of ``lvl`` (its operator, 1 / diag, buffers) as ``view`` sees it
    (``LowOps.launch_twin``: the same memory as another library's arrays)."""
    M = lvl.A

    def v(a):
        return None if a is None else view(a)

    A = LevelCSR(M.rows, M.cols, v(M.indptr), v(M.indices), view(M.vals), M.compute, v(M.rowscale),
                 offsets=v(M.offsets), nnz=M.nnz)
    return Level(A=A, dinv=view(lvl.dinv), kind=lvl.kind, bufs={k: view(b) for k, b in lvl.bufs.items()})


def lambda_max_host(M, iterations: int) -> float:
    """lambda_max(D^-1 M) of a small level: the power iteration of :func:`lambda_max` in float64 on the host
    (on a GPU, a small level's iterations cost their launches and synchronizations, not their work)."""
    M = host_csr(M)
    d = M.diagonal()
    with np.errstate(divide="ignore"):
        dinv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)
    x = np.sin(np.arange(M.shape[0], dtype=np.float64) * 12.9898 + 78.233)
    lam = 0.0
    for _ in range(iterations):
        x = dinv * (M @ x)
        nrm = float(np.linalg.norm(x))
        if not nrm > 0 or not math.isfinite(nrm):
            break
        lam = nrm
        x /= nrm
    return lam


def smoother_coefficients(opts: MGOptions, lam: float) -> list:
    """[(c_d, c_r)] of ``degree`` steps of the options' smoother (:data:`SMOOTHER_COEFFICIENTS`) for lambda_max
    ``lam`` (2 where the estimate failed)."""
    return SMOOTHER_COEFFICIENTS[opts.smoother](opts, lam if lam > 0 else 2.0)


def chebyshev_coefficients(opts: MGOptions, lam: float) -> list:
    """Chebyshev on [cheby_lower, 1.1] x lam (Saad's three-term recurrence, as PETSc and hypre)."""
    up = 1.1 * lam
    lo = opts.cheby_lower * up
    theta, delta = 0.5 * (up + lo), 0.5 * (up - lo)
    sigma = theta / delta
    rho = 1.0 / sigma
    coefs = [(0.0, 1.0 / theta)]
    for _ in range(opts.degree - 1):
        rho_new = 1.0 / (2.0 * sigma - rho)
        coefs.append((rho_new * rho, 2.0 * rho_new / delta))
        rho = rho_new
    return coefs


def jacobi_coefficients(opts: MGOptions, lam: float) -> list:
    """Damped Jacobi, omega = jacobi_weight / lam."""
    w = opts.jacobi_weight / lam
    return [(0.0, w)] * opts.degree


#: the smoothing coefficients of each smoother (``MGOptions.smoother``)
SMOOTHER_COEFFICIENTS = {"chebyshev": chebyshev_coefficients, "jacobi": jacobi_coefficients}


# --------------------------------------------------------------------------- the cycle
def smooth(low, lvl: Level, first: bool, cur: int) -> int:
    """The smoothing steps; the iterate moves between x0 and x1; returns where it is."""
    B = lvl.bufs
    for step, (c_d, c_r) in enumerate(lvl.coefs):
        src, dst = B[f"x{cur}"], B[f"x{1 - cur}"]
        if first and step == 0:
            low.mg_smooth(lvl.A, src, B["b"], lvl.dinv, B["d"], B["x0"], c_d, c_r, True)
            cur = 0
            continue
        low.mg_smooth(lvl.A, src, B["b"], lvl.dinv, B["d"], dst, c_d, c_r, False)
        cur = 1 - cur
    return cur


def final_slot(levels: list) -> int:
    """Which of x0 / x1 holds a level's result after a cycle (the same on every level: the degree is)."""
    return (2 * len(levels[0].coefs) - 1) % 2 if levels else 1


def v_cycle(low, levels: list, coarse: LevelCSR, coarse_b, coarse_x, l: int, recurse: bool = True) -> None:
    """x of level l ~ A_l^-1 b_l (b_l in levels[l].bufs['b']; the coarsest level's in ``coarse_b``, solved by the
    dense inverse ``coarse`` into ``coarse_x``); the result ends in x[final_slot] (degree steps each side).
    ``recurse`` False: this level's work only, the next level's x as it stands (``Multigrid.time_levels``)."""
    if l == len(levels):
        low.csr_apply(coarse, coarse_b, coarse_x)
        return
    lvl = levels[l]
    B = lvl.bufs
    final = final_slot(levels)
    cur = smooth(low, lvl, True, 0)
    x = B[f"x{cur}"]
    low.csr_apply(lvl.A, x, B["r"], -1.0, B["b"], 1.0)                    # r = b - A x
    last = l + 1 == len(levels)
    nb = coarse_b if last else levels[l + 1].bufs["b"]
    low.csr_apply(lvl.R, B["r"], nb)                                    # b_{l+1} = R r
    if recurse:
        v_cycle(low, levels, coarse, coarse_b, coarse_x, l + 1)
    nx = coarse_x if last else levels[l + 1].bufs[f"x{final}"]
    low.csr_apply(lvl.P, nx, x, 1.0, x, 1.0)                            # x += P x_{l+1}
    cur = smooth(low, lvl, False, cur)
    if cur != final:
        low.scale_copy(B[f"x{cur}"], B[f"x{final}"], 1.0)


def precondition(low, h, r, z) -> None:
    """z = M^-1 r: one V-cycle of the hierarchy ``h`` (``hierarchy.Hierarchy``) from level 0, r and z in the working
    dtype, the cycle in the hierarchy's; launches only (graph-capturable). The levels are of A / ``h.scale``, so z is
    scaled back; unit-diagonal levels (``h.dscale``) take s r and give back s x: two more elementwise launches (the
    products of ``mg_smooth``'s first step)."""
    levels, coarse, cb = h.levels, h.coarse, h.coarse_bufs
    if not levels:
        b, x, t, d, M = cb["b"], cb["x"], cb.get("t"), cb.get("d"), coarse
    else:
        top = levels[0].bufs
        b, x, t, d, M = top["b"], top[f"x{final_slot(levels)}"], top["r"], top["d"], levels[0].A
    if h.dscale is None:
        low.scale_copy(r, b, 1.0)
    else:                       # b = s r: r cast into the scratch t, then the product (mg_smooth's first step)
        low.scale_copy(r, t, 1.0)
        low.mg_smooth(M, None, t, h.dscale, d, b, 0.0, 1.0, True)
    if not levels:
        low.csr_apply(coarse, b, x)
    else:
        v_cycle(low, levels, coarse, cb["b"], cb["x"], 0)
    if h.dscale is not None:    # x = s x, through the scratch t
        low.mg_smooth(M, None, x, h.dscale, d, t, 0.0, 1.0, True)
        x = t
    low.scale_copy(x, z, 1.0 / h.scale)
