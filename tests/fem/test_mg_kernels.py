"""The multigrid level kernels (``csr_apply``, ``mg_smooth``) and the coefficient form of ``update_xp`` on the
GPU backends against the NumPy reference ops (hpcsolve.fem.linalg.kernels_numpy_low), which compute the same
thing in the same precisions.

- ``cudasim``: NumbaOps under the CUDA simulator (tiny sizes, n <= 50; scripts/test.sh runs them in a
  process of their own with NUMBA_ENABLE_CUDASIM=1);
- ``gpu``: CupyOps and NumbaOps on a real device (larger sizes: many blocks, grid-stride loops), plus the
  same launches recorded into a CUDA graph (``capture``) where the backend has graphs.

Matrices are random CSR (rows x cols, square and rectangular) with values stored in float64, float32 or
float16, with and without a per-row scale; vectors in T = float64 or float32. Both sides widen the stored
values exactly, so they differ only by the order of the row sums (and fused multiply-adds): the tolerance
is a few units of T's rounding times the size of the terms, rtol 1e-12 (float64) / 1e-5 (float32).
"""

import numpy as np
import pytest

from hpcsolve.fem.linalg import kernels_numpy_low, lowops

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
#: (storage, compute) pairs: those the multigrid uses, and the widening ones it may use
COMBOS = [(F64, F64), (F32, F32), (F16, F32), (F32, F64), (F16, F64)]
COMBO_IDS = [f"{s.name}-{t.name}" for s, t in COMBOS]
SHAPES = {"square": (30, 30), "tall": (41, 17), "wide": (17, 41)}
BIG_SHAPES = {"square": (3000, 3000), "tall": (4001, 1700), "wide": (1700, 4001)}
RTOL = {F64: 1e-12, F32: 1e-5}


def _tol(T):
    return RTOL[np.dtype(T)]


def _random_level(rng, rows, cols, storage, compute, rowscale, per_row=5):
    """Host arrays of a random CSR (sorted rows, no duplicates; some rows empty) and its row scale."""
    indptr = [0]
    indices = []
    for i in range(rows):
        k = 0 if i % 7 == 3 else int(rng.integers(1, min(per_row, cols) + 1))
        indices.extend(sorted(rng.choice(cols, size=k, replace=False).tolist()))
        indptr.append(len(indices))
    vals = rng.uniform(-1.0, 1.0, len(indices)).astype(storage)     # 16-bit storage: scaled rows, |a_ij| <= 1
    scale = rng.uniform(0.5, 4.0, rows).astype(compute) if rowscale else None
    return np.asarray(indptr, np.int32), np.asarray(indices, np.int32), vals, scale


def _random_banded(rng, n, storage, compute, rowscale, band=6, per_row=5):
    """A random square CSR whose entries lie within ``band`` of the diagonal (at most 2 band + 1 offsets: what
    a level stored by diagonals holds), some rows empty."""
    indptr, indices = [0], []
    for i in range(n):
        lo, hi = max(0, i - band), min(n, i + band + 1)
        k = 0 if i % 7 == 3 else int(rng.integers(1, min(per_row, hi - lo) + 1))
        indices.extend(sorted(rng.choice(np.arange(lo, hi), size=k, replace=False).tolist()))
        indptr.append(len(indices))
    vals = rng.uniform(-1.0, 1.0, len(indices)).astype(storage)
    scale = rng.uniform(0.5, 4.0, n).astype(compute) if rowscale else None
    return np.asarray(indptr, np.int32), np.asarray(indices, np.int32), vals, scale


def _level(low, host, rows, cols, compute, dia=False):
    """The host level on ``low``'s device, as CSR or (``dia``, square) stored by diagonals."""
    indptr, indices, vals, scale = host
    rs = None if scale is None else low.to_device(scale)
    if dia:
        row = np.repeat(np.arange(rows), np.diff(indptr))
        off = indices.astype(np.int64) - row
        offsets = np.unique(off)
        dv = np.zeros((offsets.size, rows), dtype=vals.dtype)
        dv[np.searchsorted(offsets, off), row] = vals
        return lowops.LevelCSR(rows, cols, None, None, low.to_device(dv.ravel()), compute, rowscale=rs,
                               offsets=low.to_device(offsets.astype(np.int32)), nnz=indices.size)
    dev = [low.to_device(a) for a in (indptr, indices, vals)]
    return lowops.LevelCSR(rows, cols, *dev, compute, rowscale=rs)


def _absmv(host, x, rows, cols):
    """|rowscale| (|M| |x|) in float64: the size of the terms each row sums (the rounding error's scale)."""
    import scipy.sparse as sp

    indptr, indices, vals, scale = host
    M = sp.csr_matrix((np.abs(vals.astype(np.float64)), indices, indptr), shape=(rows, cols))
    out = M @ np.abs(x.astype(np.float64))
    return out * np.abs(scale.astype(np.float64)) if scale is not None else out


def _close(got, ref, T, mag):
    """|got - ref| <= tol * mag elementwise, mag the size of the terms (>= |ref|; cancellation allowed)."""
    tol = _tol(T)
    err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
    bad = err > tol * (mag + np.abs(ref.astype(np.float64)))
    assert not bad.any(), f"{bad.sum()} of {bad.size} differ: got {got[bad][:4]} ref {ref[bad][:4]}"
    return float(np.max(err / (mag + np.abs(ref) + 1e-300)))


# ---------------------------------------------------------------------------------------------- checks
def check_csr_apply(low, storage, T, rowscale, rows, cols, seed=0, dia=False):
    """csr_apply with b None / b given / b is y, a and c not 1, against the NumPy ops (CSR); ``dia``: the
    tested level stored by diagonals (a banded square matrix)."""
    ref_ops = kernels_numpy_low.low_ops()
    rng = np.random.default_rng(seed)
    host = _random_banded(rng, rows, storage, T, rowscale) if dia else _random_level(rng, rows, cols, storage, T,
                                                                                      rowscale)
    Mr = _level(ref_ops, host, rows, cols, T)
    Md = _level(low, host, rows, cols, T, dia=dia)
    x = rng.standard_normal(cols).astype(T)
    b = rng.standard_normal(rows).astype(T)
    y0 = rng.standard_normal(rows).astype(T)
    mv = _absmv(host, x, rows, cols)
    for mode, a, c in (("none", 1.0, 0.0), ("none", -0.75, 0.0), ("b", 0.5, -1.25), ("b", 1.0, 0.0),
                       ("y", -1.0, 1.0), ("y", 2.0, 0.375)):
        yr = y0.copy()
        yd = low.to_device(y0)
        if mode == "none":
            ref_ops.csr_apply(Mr, x, yr, a=a)
            low.csr_apply(Md, low.to_device(x), yd, a=a)
        elif mode == "b":
            ref_ops.csr_apply(Mr, x, yr, a=a, b=b, c=c)
            low.csr_apply(Md, low.to_device(x), yd, a=a, b=low.to_device(b), c=c)
        else:                                            # accumulate into y: b is y
            ref_ops.csr_apply(Mr, x, yr, a=a, b=yr, c=c)
            low.csr_apply(Md, low.to_device(x), yd, a=a, b=yd, c=c)
        got = low.to_host(yd)
        assert got.dtype == np.dtype(T)
        bmag = 0.0 if mode == "none" else abs(c) * np.abs((b if mode == "b" else y0).astype(np.float64))
        _close(got, yr, T, abs(a) * mv + bmag)


def check_mg_smooth(low, storage, T, rowscale, n, seed=1, dia=False):
    """mg_smooth: the first step (x_in not read, d overwritten), a Chebyshev step and a Jacobi step."""
    ref_ops = kernels_numpy_low.low_ops()
    rng = np.random.default_rng(seed)
    host = _random_banded(rng, n, storage, T, rowscale) if dia else _random_level(rng, n, n, storage, T, rowscale)
    Mr = _level(ref_ops, host, n, n, T)
    Md = _level(low, host, n, n, T, dia=dia)
    b = rng.standard_normal(n).astype(T)
    dinv = rng.uniform(0.2, 1.0, n).astype(T)
    x_in = rng.standard_normal(n).astype(T)
    d0 = rng.standard_normal(n).astype(T)
    for first, c_d, c_r in ((True, 0.3, 0.8), (False, 0.4, 1.1), (False, 0.0, 0.6667)):
        dr, xr = d0.copy(), np.full(n, np.nan, T)
        ref_ops.mg_smooth(Mr, None if first else x_in, b, dinv, dr, xr, c_d, c_r, first)
        dd, xd = low.to_device(d0), low.to_device(np.full(n, np.nan, T))
        xin_d = low.to_device(x_in)
        low.mg_smooth(Md, xin_d, low.to_device(b), low.to_device(dinv), dd, xd, c_d, c_r, first)
        gd, gx = low.to_host(dd), low.to_host(xd)
        assert gd.dtype == gx.dtype == np.dtype(T)
        r_mag = np.abs(b.astype(np.float64)) + (0.0 if first else _absmv(host, x_in, n, n))
        d_mag = (0.0 if first else abs(c_d) * np.abs(d0.astype(np.float64))) + abs(c_r) * dinv * r_mag
        _close(gd, dr, T, d_mag)
        _close(gx, xr, T, d_mag + (0.0 if first else np.abs(x_in.astype(np.float64))))
        np.testing.assert_array_equal(low.to_host(xin_d), x_in)     # x_in is only read


BETAS = {"cg": (5, 4, 1.0), "flexible": (6, 2, -1.0), "no-den": (6, -1, 2.0), "const": (-1, -1, 0.5),
         "zero-den": (5, 7, 1.0)}


def check_update_xp(low, T, with_dinv, beta, n, seed=2):
    """update_xp with the coefficient triple beta; ws: rho at 4, pq at 2, rho1 at 5, z.q at 6, a 0 at 7."""
    ref_ops = kernels_numpy_low.low_ops()
    rng = np.random.default_rng(seed)
    ws = np.array([0.0, 0.0, 2.5, 0.0, 1.75, 0.625, -0.3, 0.0])
    x, p, r = (rng.standard_normal(n).astype(T) for _ in range(3))
    dinv = rng.uniform(0.2, 1.0, n).astype(T) if with_dinv else None
    xr, pr = x.copy(), p.copy()
    ref_ops.update_xp(xr, pr, r, dinv, ws.copy(), 4, 2, beta)
    xd, pd = low.to_device(x), low.to_device(p)
    low.update_xp(xd, pd, low.to_device(r), None if dinv is None else low.to_device(dinv), low.to_device(ws), 4, 2,
                  beta)
    p64 = np.abs(p.astype(np.float64))
    _close(low.to_host(xd), xr, T, np.abs(x) + p64)                    # alpha = 1.75 / 2.5
    _close(low.to_host(pd), pr, T, np.abs(r) * (1.0 if dinv is None else dinv) + p64)    # |beta| <= 0.6


@pytest.mark.parametrize("rowscale", [False, True], ids=["noscale", "rowscale"])
@pytest.mark.parametrize("storage,T", COMBOS, ids=COMBO_IDS)
def test_numpy_dia_levels_match_csr(storage, T, rowscale):
    """The NumPy reference on a level stored by diagonals against the same level as CSR."""
    low = kernels_numpy_low.low_ops()
    check_csr_apply(low, storage, T, rowscale, 60, 60, dia=True)
    check_mg_smooth(low, storage, T, rowscale, 60, dia=True)


# ------------------------------------------------------------------------------- the CUDA simulator
@pytest.fixture(scope="module")
def sim_ops():
    from hpcsolve.fem.linalg import kernels_numba

    return kernels_numba.low_ops()


@pytest.mark.cudasim
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("rowscale", [False, True], ids=["noscale", "rowscale"])
@pytest.mark.parametrize("storage,T", COMBOS, ids=COMBO_IDS)
def test_sim_csr_apply_matches_numpy(sim_ops, storage, T, rowscale, shape):
    check_csr_apply(sim_ops, storage, T, rowscale, *SHAPES[shape])


@pytest.mark.cudasim
@pytest.mark.parametrize("rowscale", [False, True], ids=["noscale", "rowscale"])
@pytest.mark.parametrize("storage,T", COMBOS, ids=COMBO_IDS)
def test_sim_mg_smooth_matches_numpy(sim_ops, storage, T, rowscale):
    check_mg_smooth(sim_ops, storage, T, rowscale, 30)


@pytest.mark.cudasim
@pytest.mark.parametrize("rowscale", [False, True], ids=["noscale", "rowscale"])
@pytest.mark.parametrize("storage,T", [(F32, F32), (F16, F32), (F64, F64)], ids=["f32-f32", "f16-f32", "f64-f64"])
def test_sim_dia_levels_match_numpy(sim_ops, storage, T, rowscale):
    check_csr_apply(sim_ops, storage, T, rowscale, 30, 30, dia=True)
    check_mg_smooth(sim_ops, storage, T, rowscale, 30, dia=True)


@pytest.mark.cudasim
@pytest.mark.parametrize("beta", list(BETAS))
@pytest.mark.parametrize("with_dinv", [False, True], ids=["cg", "jacobi"])
@pytest.mark.parametrize("T", [F64, F32], ids=["f64", "f32"])
def test_sim_update_xp_coefficient(sim_ops, T, with_dinv, beta):
    check_update_xp(sim_ops, T, with_dinv, BETAS[beta], 40)


@pytest.mark.cudasim
def test_sim_numba_has_no_graphs(sim_ops):
    """The simulator has no streams to capture: capture returns None and says why."""
    assert not sim_ops.graphs and not sim_ops.supports_graphs
    assert sim_ops.capture(lambda: None) is None
    assert sim_ops.graph_error


# ------------------------------------------------------------------------------------- a real GPU
def _gpu_ops(gpu_backend_names):
    from hpcsolve.core import backends

    return [(name, backends.get(name).piece("fem.low_ops")()) for name in gpu_backend_names]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", list(BIG_SHAPES))
@pytest.mark.parametrize("rowscale", [False, True], ids=["noscale", "rowscale"])
@pytest.mark.parametrize("storage,T", COMBOS, ids=COMBO_IDS)
def test_gpu_csr_apply_matches_numpy(gpu_backend_names, storage, T, rowscale, shape):
    for name, low in _gpu_ops(gpu_backend_names):
        check_csr_apply(low, storage, T, rowscale, *BIG_SHAPES[shape])


@pytest.mark.gpu
@pytest.mark.parametrize("rowscale", [False, True], ids=["noscale", "rowscale"])
@pytest.mark.parametrize("storage,T", COMBOS, ids=COMBO_IDS)
def test_gpu_mg_smooth_matches_numpy(gpu_backend_names, storage, T, rowscale):
    for name, low in _gpu_ops(gpu_backend_names):
        check_mg_smooth(low, storage, T, rowscale, 5000)


@pytest.mark.gpu
@pytest.mark.parametrize("rowscale", [False, True], ids=["noscale", "rowscale"])
@pytest.mark.parametrize("storage,T", COMBOS, ids=COMBO_IDS)
def test_gpu_dia_levels_match_numpy(gpu_backend_names, storage, T, rowscale):
    for name, low in _gpu_ops(gpu_backend_names):
        check_csr_apply(low, storage, T, rowscale, 5000, 5000, dia=True)
        check_mg_smooth(low, storage, T, rowscale, 5000, dia=True)


@pytest.mark.gpu
@pytest.mark.parametrize("beta", list(BETAS))
@pytest.mark.parametrize("with_dinv", [False, True], ids=["cg", "jacobi"])
@pytest.mark.parametrize("T", [F64, F32], ids=["f64", "f32"])
def test_gpu_update_xp_coefficient(gpu_backend_names, T, with_dinv, beta):
    for name, low in _gpu_ops(gpu_backend_names):
        check_update_xp(low, T, with_dinv, BETAS[beta], 100_000)


@pytest.mark.gpu
@pytest.mark.parametrize("storage,T", [(F64, F64), (F16, F32)], ids=["f64-f64", "f16-f32"])
def test_gpu_graph_replays_the_level_kernels(gpu_backend_names, storage, T):
    """A V-cycle-like sequence (two smoothing steps, a residual, a restriction) recorded by ``capture``
    and replayed twice gives what the direct launches give; a backend without graphs says why."""
    n, nc = 4000, 1500
    rng = np.random.default_rng(3)
    hA = _random_level(rng, n, n, storage, T, storage == F16)
    hR = _random_level(rng, nc, n, storage, T, False)
    b = rng.standard_normal(n).astype(T)
    dinv = rng.uniform(0.2, 1.0, n).astype(T)
    for name, low in _gpu_ops(gpu_backend_names):
        A, R = _level(low, hA, n, n, T), _level(low, hR, nc, n, T)
        bd, dd = low.to_device(b), low.to_device(dinv)
        d, x0, x1, r, rc = (low.zeros(m, T) for m in (n, n, n, n, nc))

        def cycle():
            low.mg_smooth(A, x1, bd, dd, d, x0, 0.0, 0.7, True)
            low.mg_smooth(A, x0, bd, dd, d, x1, 0.3, 0.9, False)
            low.csr_apply(A, x1, r, a=-1.0, b=bd, c=1.0)
            low.csr_apply(R, r, rc)
            low.csr_apply(R, r, rc, a=0.5, b=rc, c=1.0)

        cycle()
        want = [low.to_host(v) for v in (x1, r, rc)]
        for v in (d, x0, x1, r, rc):
            low.fill_zero(v)
        g = low.capture(cycle)
        print(f"\n{name}: graphs {low.graphs}, capture {'a graph' if g else 'None'}; "
              f"{getattr(low, 'graph_error', None)}")
        if low.graphs:
            assert g is not None, getattr(low, "graph_error", None)
        if g is None:
            continue
        assert not np.any(low.to_host(rc)), "capture must record, not run"
        for _ in range(2):
            g()
            got = [low.to_host(v) for v in (x1, r, rc)]
            for a, w in zip(got, want):
                np.testing.assert_array_equal(a, w)      # same kernels, same inputs: bitwise the same


@pytest.mark.gpu
def test_gpu_numba_failed_capture_falls_back(gpu_backend_names):
    """A block that cannot be recorded (it reads a result back to the host) makes ``capture`` return None
    with the reason in ``graph_error``; the ops then work as before, launched directly."""
    if "numba-cuda" not in gpu_backend_names:
        pytest.skip("numba-cuda not usable here")
    from hpcsolve.fem.linalg import kernels_numba

    low = kernels_numba.low_ops()
    if not low.graphs:
        pytest.skip(f"NumbaOps has no graphs here: {low.graph_error}")
    n = 1000
    rng = np.random.default_rng(4)
    host = _random_level(rng, n, n, F32, F32, True)
    M = _level(low, host, n, n, F32)
    x = rng.standard_normal(n).astype(np.float32)
    xd, yd = low.to_device(x), low.zeros(n, np.float32)

    def bad():
        low.csr_apply(M, xd, yd)
        low.to_host(yd)                    # a synchronizing copy: not allowed while the stream captures

    assert low.capture(bad) is None
    print(f"\ngraph_error: {low.graph_error}")
    assert "capture failed" in low.graph_error
    low.graph_error = None
    ref = np.empty(n, np.float32)
    kernels_numpy_low.low_ops().csr_apply(_level(kernels_numpy_low.low_ops(), host, n, n, F32), x, ref)
    low.csr_apply(M, xd, yd)
    _close(low.to_host(yd), ref, F32, _absmv(host, x, n, n))
    assert low.capture(lambda: low.csr_apply(M, xd, yd)) is not None      # and capture works again
