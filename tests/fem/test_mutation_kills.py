"""FEM, codec-free report figures and CUDA C runtime checks added by the mutation check (scripts/mutation_check.py,
docs/design/testing.md "Mutation check").

Every reference here is independent of the code under test: exact integrals of P1 basis functions, textbook
element energies, CG's finite termination (n distinct eigenvalues -> n iterations), the Chebyshev polynomial
T_k, the analytic lambda_max of the 1D Laplacian, P1 interpolation of linear functions, the definitions of the
norms and byte counts. The FEM CuPy module's warp / block reductions (CUDA C, GPU-only) are emulated lane by lane
from their generated text: a reduction that drops lanes or warps fails here, without a GPU.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import scipy.sparse as sp

from hpcsolve.fem.discrete import assembly
from hpcsolve.fem.discrete import mesh as meshmod

RNG = np.random.default_rng(485)


def _jittered_mesh(nx=6, ny=5):
    m = meshmod.rectangle(nx, ny, (0.0, 1.5), (0.0, 1.0))
    p = m.points.copy()
    inner = (p[:, 0] > 0) & (p[:, 0] < 1.5) & (p[:, 1] > 0) & (p[:, 1] < 1.0)
    p[inner] += 0.06 * RNG.uniform(-1, 1, (inner.sum(), 2))
    m.points = p
    assert (m.areas() > 0).all()
    return m


# ------------------------------------------------------------------------------ assembly and load quadrature
def test_load_vector_is_the_exact_integral_of_a_linear_source():
    """b_i = int_T f phi_i = |T|/12 (2 f_i + f_j + f_k) for f linear (the midpoint rule is exact there), and
    |T|/3 f for a constant f, summed over the triangles of each node."""
    m = _jittered_mesh()
    f = lambda x, y: 1.5 + 2.0 * x - 3.0 * y          # noqa: E731
    fn = f(m.points[:, 0], m.points[:, 1])
    area = m.areas()
    want = np.zeros(m.n_points)
    for (a, b, c), A in zip(m.triangles, area):
        for i, j, k in ((a, b, c), (b, c, a), (c, a, b)):
            want[i] += A / 12 * (2 * fn[i] + fn[j] + fn[k])
    np.testing.assert_allclose(assembly.load(m, f), want, rtol=1e-12, atol=1e-15)
    const = np.zeros(m.n_points)
    np.add.at(const, m.triangles.ravel(), np.repeat(2.5 * area / 3, 3))
    np.testing.assert_allclose(assembly.load(m, 2.5), const, rtol=1e-12)


def test_mass_and_stiffness_energies_of_linear_functions():
    """u = a + b x + c y: u^T M u = int u^2 (exact per triangle by the midpoint rule, u^2 quadratic) and
    u^T K u = (b^2 + c^2) |Omega|."""
    m = _jittered_mesh()
    x, y = m.points[:, 0], m.points[:, 1]
    u = 0.3 + 2.0 * x - 1.0 * y
    p = m.points[m.triangles]
    mids = 0.5 * (p + p[:, [1, 2, 0]])
    exact = (m.areas() / 3 * ((0.3 + 2.0 * mids[..., 0] - mids[..., 1]) ** 2).sum(1)).sum()
    assert u @ (assembly.mass(m) @ u) == pytest.approx(exact, rel=1e-12)
    assert u @ (assembly.stiffness(m, 1.0) @ u) == pytest.approx(5.0 * 1.5, rel=1e-12)


@pytest.mark.parametrize("model", ["plane_strain", "plane_stress"])
def test_elasticity_energy_of_a_uniform_strain(model):
    """u = (exx x + g/2 y, g/2 x + eyy y): energy u^T K u = |Omega| eps^T D eps, D the textbook matrix."""
    E, nu = 210.0, 0.3
    D = (E / (1 - nu ** 2) * np.array([[1, nu, 0], [nu, 1, 0], [0, 0, (1 - nu) / 2]]) if model == "plane_stress"
         else E / ((1 + nu) * (1 - 2 * nu)) * np.array([[1 - nu, nu, 0], [nu, 1 - nu, 0], [0, 0, (1 - 2 * nu) / 2]]))
    np.testing.assert_allclose(assembly.elasticity_matrix(E, nu, model), D, rtol=1e-14)
    m = _jittered_mesh()
    x, y = m.points[:, 0], m.points[:, 1]
    eps = np.array([1e-3, -4e-4, 6e-4])                 # exx, eyy, engineering shear
    u = np.stack([eps[0] * x + eps[2] / 2 * y, eps[2] / 2 * x + eps[1] * y], axis=1).ravel()
    K = assembly.elasticity_stiffness(m, E, nu, model)
    assert u @ (K @ u) == pytest.approx(1.5 * eps @ D @ eps, rel=1e-10)


def test_edge_load_and_dirichlet_lifting():
    m = _jittered_mesh()
    edges = m.boundary_edges
    L = np.linalg.norm(m.points[edges[:, 1]] - m.points[edges[:, 0]], axis=1)
    b = assembly.edge_load(m, edges, 2.0)
    want = np.zeros(m.n_points)
    np.add.at(want, edges.ravel(), np.repeat(L, 2))          # 2.0 * L / 2 to each end
    np.testing.assert_allclose(b, want, rtol=1e-12)
    assert b.sum() == pytest.approx(2.0 * 2 * (1.5 + 1.0))
    # Laplace with u = 1 + x - 2 y on the boundary: the condensed system gives the linear function inside
    K = assembly.stiffness(m, 1.0)
    fixed = np.unique(edges)
    x, y = m.points[:, 0], m.points[:, 1]
    exact = 1 + x - 2 * y
    Aff, rhs, free = assembly.condense(K, np.zeros(m.n_points), fixed, exact[fixed])
    import scipy.sparse.linalg as spla

    np.testing.assert_allclose(spla.spsolve(Aff.tocsc(), rhs), exact[free], rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------------ CG coefficients
@pytest.mark.parametrize("method,precond", [("cg", None), ("pcg-jacobi", None)])
def test_cg_terminates_in_as_many_iterations_as_distinct_eigenvalues(method, precond):
    """CG on an SPD matrix with 5 distinct eigenvalues (spread 1 .. 1e3) converges in 5 iterations in exact
    arithmetic; fp64 needs at most 7 here. A wrong alpha or beta loses the conjugacy (tens of iterations)."""
    from hpcsolve.fem import solve

    lam = np.repeat([1.0, 3.0, 20.0, 150.0, 1000.0], 60)
    Q = sp.diags(RNG.uniform(0.5, 2.0, lam.size))                  # a diagonal scaling: Jacobi sees a non-identity
    A = (Q @ sp.diags(lam) @ Q).tocsr() if method == "cg" else sp.diags(lam).tocsr()
    b = RNG.standard_normal(lam.size)
    x, rep = solve(A, b, "fp64", "numpy", rtol=1e-10, method=method, check_every=1)
    assert np.linalg.norm(A @ x - b) <= 1e-9 * np.linalg.norm(b)
    if method == "pcg-jacobi":      # D^-1 A = I: one iteration
        assert rep.iterations <= 2, rep.iterations
    else:
        # the scaled matrix has up to 300 distinct eigenvalues: compare with SciPy's CG, an independent one
        import scipy.sparse.linalg as spla

        count = []
        spla.cg(A, b, rtol=1e-10, maxiter=2000, callback=lambda xk: count.append(1))
        assert rep.iterations <= len(count) + 2, (rep.iterations, len(count))
    A5 = sp.diags(lam).tocsr()
    x, rep = solve(A5, b, "fp64", "numpy", rtol=1e-10, method="cg", check_every=1)
    assert rep.iterations <= 7, rep.iterations


def test_cg_bytes_per_iteration_by_its_definition():
    from hpcsolve.fem.linalg.cg_engine import bytes_per_iteration

    n, nnz, s = 100, 500, 8
    spmv = nnz * (s + 4) + (n + 1) * 4 + 2 * n * s
    assert bytes_per_iteration(n, nnz, np.float64) == spmv + 3 * n * s + 5 * n * s
    assert bytes_per_iteration(n, nnz, np.float64, jacobi=True) == spmv + 10 * n * s
    assert bytes_per_iteration(n, nnz, np.float32, matrix_free=True) == 2 * n * 4 + 8 * n * 4


# ------------------------------------------------------------------------------ smoothers and grid transfers
def _error_multiplier(coefs, mu):
    """The smoother's error after its steps, per eigenvalue mu of D^-1 A (mg_smooth: d = c_d d + c_r D^-1 r,
    x += d; D^-1 r = -mu e), from e = 1."""
    e, d = np.ones_like(mu), np.zeros_like(mu)
    for c_d, c_r in coefs:
        d = c_d * d - c_r * mu * e
        e = e + d
    return e


@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_chebyshev_smoother_is_the_scaled_chebyshev_polynomial(degree):
    """Error multiplier of the smoother = T_k((theta - mu) / delta) / T_k(theta / delta) on [lo, up] =
    [0.3, 1.1] x lambda (the definition: the smallest maximum on the interval)."""
    from hpcsolve.fem.linalg.precond.cycle import smoother_coefficients
    from hpcsolve.fem.linalg.precond.mg_options import MGOptions

    lam = 1.7
    coefs = smoother_coefficients(MGOptions(smoother="chebyshev", degree=degree), lam)
    assert len(coefs) == degree
    up, lo = 1.1 * lam, 0.3 * 1.1 * lam
    theta, delta = (up + lo) / 2, (up - lo) / 2
    mu = np.linspace(0, up, 201)
    T = np.polynomial.chebyshev.Chebyshev.basis(degree)
    np.testing.assert_allclose(_error_multiplier(coefs, mu), T((theta - mu) / delta) / T(theta / delta),
                               rtol=1e-10, atol=1e-13)


def test_jacobi_smoother_weight():
    from hpcsolve.fem.linalg.precond.cycle import smoother_coefficients
    from hpcsolve.fem.linalg.precond.mg_options import MGOptions

    coefs = smoother_coefficients(MGOptions(smoother="jacobi", degree=3), 1.6)
    mu = np.linspace(0, 1.6, 11)
    np.testing.assert_allclose(_error_multiplier(coefs, mu), (1 - (4 / 3) / 1.6 * mu) ** 3, rtol=1e-12, atol=1e-14)


def test_host_power_iteration_of_the_jacobi_scaled_laplacian():
    """lambda_max(D^-1 A) of the 1D Laplacian tridiag(-1, 2, -1) is 1 + cos(pi / (n + 1)); the estimate (a norm
    growth of a symmetric operator) stays below it."""
    from hpcsolve.fem.linalg.precond.cycle import lambda_max_host

    n = 40
    A = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tocsr() * 3.0
    lam = lambda_max_host(A, 60)
    exact = 1 + np.cos(np.pi / (n + 1))
    assert 0.97 * exact < lam <= exact * (1 + 1e-12), (lam, exact)


def test_geometric_prolongation_interpolates_linear_functions():
    """P1 prolongation from the grid with half the cells reproduces a linear function at every fine node whose
    coarse neighbours are all free."""
    from hpcsolve.fem.linalg.precond.geometric import StructuredGrid, geometric_prolongation

    nx, ny = 8, 6
    P, coarse, _ = geometric_prolongation(StructuredGrid(nx, ny))
    f = lambda X, Y: 0.7 + 1.3 * X - 0.4 * Y          # noqa: E731
    fj, fi = np.divmod(np.arange((nx - 1) * (ny - 1)), nx - 1)
    fi, fj = fi + 1, fj + 1
    cj, ci = np.divmod(np.arange((nx // 2 - 1) * (ny // 2 - 1)), nx // 2 - 1)
    ci, cj = 2 * (ci + 1), 2 * (cj + 1)
    assert P.shape == (fi.size, ci.size)
    fine = P @ f(ci, cj)
    inner = (fi >= 2) & (fi <= nx - 2) & (fj >= 2) & (fj <= ny - 2)
    np.testing.assert_allclose(fine[inner], f(fi, fj)[inner], rtol=1e-13)


# ------------------------------------------------------------------------------ report figures
def test_field_error_norms_by_definition():
    from hpcsolve.report.comparison import field_error

    e = field_error(np.array([1.0, 2.0, 3.0, -1.0]), np.array([1.0, 1.0, 1.0, 2.0]))
    assert e["rel_l2"] == pytest.approx(np.sqrt(0 + 1 + 4 + 9) / np.sqrt(1 + 1 + 1 + 4), rel=1e-14)
    assert e["rel_max"] == pytest.approx(3.0 / 2.0, rel=1e-14)


def test_bandwidth_figures_by_definition(monkeypatch):
    from hpcsolve.core import backends
    from hpcsolve.core.precision import get_precision
    from hpcsolve.lbm.steppers.gpu_common import bytes_per_cell
    from hpcsolve.report import bench_lbm

    bw = backends._bandwidth("numpy", 1000, [1.0, 2.0, 4.0])     # a copy of N bytes moves 2 N (read + write)
    assert bw["bandwidth_Bps"] == pytest.approx(1000.0) and bw["bandwidth_GBps"] == pytest.approx(1e-6)
    # 9 populations read and 9 written plus the flag byte; two arrays resident, one in place
    assert bytes_per_cell(get_precision("fp32", "lbm"), False) == (2 * 9 * 4 + 1, 2 * 9 * 4 + 1)
    assert bytes_per_cell(get_precision("fp64", "lbm"), True) == (2 * 9 * 8 + 1, 9 * 8 + 1)
    assert bytes_per_cell(get_precision("fp16s", "lbm"), True) == (2 * 9 * 2 + 1, 9 * 2 + 1)
    real = bench_lbm.get_stepper

    def stepper(backend, setup):
        st = real(backend, setup)
        st.bytes_per_cell_step, st.bytes_per_cell_resident = 73, 73
        st.perturb = lambda *a, **k: None          # (a GPU stepper's method; the figures do not depend on it)
        return st

    monkeypatch.setattr(bench_lbm, "get_stepper", stepper)
    row = bench_lbm.time_backend("numpy", "fp32", 12, steps=2, repeats=1, warmup=1)
    assert row["mlups"] == pytest.approx(144 / row["seconds_per_step"] / 1e6, rel=1e-12)
    # MLUPS x bytes per cell step = bytes per second; GB = 1e9 bytes
    assert row["effective_bandwidth_GBps"] == pytest.approx(row["mlups"] * 1e6 * 73 / 1e9, rel=1e-12)


# ------------------------------------------------------------------------------ the FEM CUDA C reductions
def _module():
    from hpcsolve.fem.linalg import kernels_cupy

    return kernels_cupy.source()


def _warp_reduce(src: str, name: str, op, v: np.ndarray) -> np.ndarray:
    """Emulate ``name``'s loop ``for (int o = A; o > B; o >>= S) v = op(v, __shfl_down_sync(FULL_MASK, v, o))`` on
    32 lanes (CUDA: a lane whose source lane is past 31 reads its own value)."""
    body = re.search(name + r"\(double v\) \{\s*for \(int o = (\d+); o > (\d+); o >>= (\d+)\) (.*?);", src, re.S)
    assert body, f"{name}: loop not found"
    o, stop, shift = int(body.group(1)), int(body.group(2)), int(body.group(3))
    v = v.astype(float).copy()
    lanes = np.arange(32)
    while o > stop:
        other = np.where(lanes + o <= 31, v[np.minimum(lanes + o, 31)], v)
        v = op(v, other)
        o >>= shift
    return v


def test_warp_sum_and_warp_max_reduce_all_32_lanes():
    src = _module()
    v = RNG.uniform(0, 1, 32)
    assert _warp_reduce(src, "warp_sum", np.add, v)[0] == pytest.approx(v.sum(), rel=1e-14)
    assert _warp_reduce(src, "warp_max", np.maximum, v)[0] == v.max()
    w = np.zeros(32)
    w[31] = 5.0
    assert _warp_reduce(src, "warp_max", np.maximum, w)[0] == 5.0


@pytest.mark.parametrize("threads", [32, 64, 256, 1024])
def test_block_add2_sums_every_warp(threads):
    """block_add2: warp sums, lane 0 of each warp stores its sum in sa[wid], warp 0 sums the first nw slots.
    Emulated from the generated text's index expressions."""
    src = _module()
    fn = src[src.index("void block_add2"):]
    lane_e, wid_e = re.search(r"const int lane = threadIdx\.x ([^,]+), wid = threadIdx\.x ([^;]+);", fn).groups()
    store_lane = int(re.search(r"if \(lane == (\d+)\) \{ sa\[wid\] = a;", fn).group(1))
    nw_e = re.search(r"const int nw = blockDim\.x ([^;]+);", fn).group(1)
    take_e = re.search(r"a = (lane < [^?]+)\? sa\[lane\] : 0\.0;", fn).group(1)
    vals = RNG.uniform(0, 1, threads)
    t = np.arange(threads)
    lane, wid = eval(f"t {lane_e}"), eval(f"t {wid_e}")
    sums = np.zeros(threads)
    for w in range(threads // 32):
        sums[w * 32:(w + 1) * 32] = _warp_reduce(src, "warp_sum", np.add, vals[w * 32:(w + 1) * 32])
    sa = np.zeros(32)
    for k in range(threads):
        if lane[k] == store_lane:
            sa[wid[k]] = sums[k]
    nw = eval(f"threads {nw_e}")
    first = np.array([sa[ln] if eval(take_e, {}, {"lane": ln, "nw": nw}) else 0.0 for ln in range(32)])
    assert _warp_reduce(src, "warp_sum", np.add, first)[0] == pytest.approx(vals.sum(), rel=1e-13)
