"""Multigrid preconditioners (hpcsolve.fem.linalg.precond.multigrid): symmetry, two-grid factor, h-independent cycle
counts, agreement with spsolve, robustness problems, options and errors. NumPy backend (CI); the GPU
agreement tests are marked ``gpu``."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.precond import hierarchy as hmod
from hpcsolve.fem.linalg.precond import multigrid as mgm
from hpcsolve.fem.linalg.precond.aggregation import rho_dinv_a, sa_levels
from hpcsolve.fem.linalg.precond.cycle import lambda_max
from hpcsolve.fem.linalg.precond.geometric import GeometricBuilder, StructuredGrid, galerkin_by_probing, \
    geometric_prolongation
from hpcsolve.fem.linalg.precond.mg_options import MGOptions
from hpcsolve.fem import prepare_matrix, solve
from hpcsolve.fem.discrete import testproblems as tp
from hpcsolve.fem.linalg.kernels_numpy_low import low_ops

F64 = np.float64


def _pc(problem, kind="mg", **options):
    return mgm.Multigrid(kind, options, grid=problem.grid, near_nullspace=problem.near_nullspace)


def _apply(pc, A, v):
    out = np.zeros(A.n)
    pc.apply(v.copy(), out)
    return out


@pytest.mark.parametrize("kind", ["mg", "amg"])
def test_vcycle_is_symmetric_and_positive_in_fp64(kind):
    P = tp.poisson_fd(31)
    A = prepare_matrix(P.A)
    pc = _pc(P, kind, hierarchy="fp64")
    pc.setup(A)
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(A.n), rng.standard_normal(A.n)
    mx, my = _apply(pc, A, x), _apply(pc, A, y)
    scale = np.linalg.norm(x) * np.linalg.norm(my)
    assert abs(x @ my - y @ mx) / scale < 1e-13
    assert pc.symmetry_defect < 1e-13
    for v in (x, y, rng.random(A.n)):
        assert v @ _apply(pc, A, v) > 0


def test_low_precision_vcycle_is_only_nearly_symmetric_and_the_report_says_so():
    P = tp.poisson_fd(31)
    x, rep = solve(P.A, P.b, preconditioner=_pc(P, hierarchy="fp32"), rtol=1e-10)
    info = rep.preconditioner
    assert 0 < info["symmetry_defect"] < 1e-5     # float32 rounding, not exactly symmetric
    assert info["flexible"] is True
    assert rep.converged and rep.true_residual <= 1e-10


def test_two_grid_convergence_factor_below_0_2_on_poisson():
    P = tp.poisson_fd(63)
    A = prepare_matrix(P.A)
    pc = _pc(P, hierarchy="fp64", max_levels=2, coarse_size=1000)
    pc.setup(A)
    assert pc.info()["levels"] == 2 and pc.info()["level_kinds"] == ["geometric", "direct"]
    xs = np.linalg.solve(P.A.toarray(), P.b) if P.n < 5000 else spla.spsolve(P.A.tocsc(), P.b)
    x = np.zeros(P.n)
    errs = []
    for _ in range(6):          # stationary two-grid iteration x += M (b - A x)
        x = x + _apply(pc, A, P.b - P.A @ x)
        e = x - xs
        errs.append(math.sqrt(e @ (P.A @ e)))
    factor = (errs[-1] / errs[1]) ** (1 / 4)
    assert factor < 0.2


@pytest.mark.parametrize("kind", ["mg", "amg"])
def test_cycle_counts_do_not_grow_with_the_mesh(kind):
    its = []
    for m in (31, 63, 127, 255):
        P = tp.poisson_fd(m)
        x, rep = solve(P.A, P.b, preconditioner=_pc(P, kind), rtol=1e-10)
        assert rep.converged
        its.append(rep.iterations)
    assert max(its) <= (12 if kind == "mg" else 16)
    assert max(its) - min(its) <= (2 if kind == "mg" else 5)


@pytest.mark.parametrize("hierarchy", ["fp64", "fp32", "fp16"])
@pytest.mark.parametrize("precision,method", [("fp64", "cg"), ("mixed", "cg-reliable"), ("mixed", "ir-restarted")])
def test_agrees_with_spsolve(hierarchy, precision, method):
    P = tp.poisson_p1(24)
    ref = spla.spsolve(P.A.tocsc(), P.b)
    x, rep = solve(P.A, P.b, precision=precision, method=method, preconditioner=_pc(P, hierarchy=hierarchy),
                   rtol=1e-10)
    assert rep.converged and rep.true_residual <= 1e-10
    assert np.linalg.norm(x - ref) / np.linalg.norm(ref) < 1e-8
    assert rep.preconditioner["hierarchy"] == hierarchy
    assert rep.iterations <= 25


@pytest.mark.parametrize("make,kind,limit", [
    (lambda: tp.anisotropic(48), "amg", 120),
    (lambda: tp.jumps(48, 1e6), "amg", 40),
    (lambda: tp.jumps(48, 1e6), "mg", 30),
    (lambda: tp.cook(16), "amg", 90),
    (lambda: tp.cook(16), "mg", 90),
])
def test_robust_problems_converge_far_faster_than_plain_cg(make, kind, limit):
    P = make()
    x0, plain = solve(P.A, P.b, rtol=1e-10, maxiter=50_000)
    for hierarchy in ("fp32", "fp16"):
        x, rep = solve(P.A, P.b, preconditioner=_pc(P, kind, hierarchy=hierarchy), rtol=1e-10)
        assert rep.converged and rep.true_residual <= 1e-10
        assert rep.iterations <= limit
        assert rep.iterations * 4 < plain.iterations
        assert np.linalg.norm(x - x0) / np.linalg.norm(x0) < 1e-7


def test_fp16_hierarchy_keeps_coefficient_jumps_in_range():
    """Rows scaled to a unit diagonal: a 1e6 jump neither overflows nor flushes the 16-bit values."""
    P = tp.jumps(32, 1e6)
    A = prepare_matrix(P.A)
    pc = _pc(P, hierarchy="fp16")
    pc.setup(A)
    top = pc.levels[0].A
    assert top.vals.dtype == np.float16 and top.rowscale is not None
    assert np.all(np.isfinite(top.vals)) and np.max(np.abs(top.vals)) <= 1.0 + 1e-3
    # the 16-bit operator times its row scales is the matrix to float16 rounding
    back = sp.diags(top.rowscale.astype(F64)) @ _level_scipy(top)
    assert abs(back - P.A).max() / np.abs(P.A.data).max() < 1e-3


def _level_scipy(M):
    """A SciPy copy (float64) of a LevelCSR stored as CSR or by diagonals."""
    if M.offsets is None:
        return sp.csr_matrix((M.vals.astype(F64), M.indices, M.indptr), shape=M.shape)
    n = M.rows
    V = M.vals.reshape(M.ndiag, n).astype(F64)
    parts = [(np.arange(max(0, -o), min(n, n - o)), k, o) for k, o in enumerate(M.offsets.tolist())]
    rows = np.concatenate([i for i, _, _ in parts])
    cols = np.concatenate([i + o for i, _, o in parts])
    vals = np.concatenate([V[k, i] for i, k, _ in parts])
    return sp.csr_matrix((vals, (rows, cols)), shape=M.shape)


@pytest.mark.parametrize("make,formats", [(lambda: tp.poisson_fd(63), {"dia"}), (lambda: tp.poisson_p1(64), {"dia"}),
                                          (lambda: tp.cook(16), {"dia", "csr"}), (lambda: tp.jumps(64, 1e6), {"dia"})])
@pytest.mark.parametrize("hierarchy", ["fp64", "fp32", "fp16"])
def test_levels_stored_by_diagonals_are_the_csr_levels(make, formats, hierarchy):
    """level_format dia (auto on a GPU) stores structured levels by diagonals where that reads fewer bytes: the same
    operators as CSR storage, the same V-cycle to rounding, the same iteration count."""
    P = make()
    A = prepare_matrix(P.A)
    auto, csr = _pc(P, hierarchy=hierarchy, level_format="dia"), _pc(P, hierarchy=hierarchy, level_format="csr")
    auto.setup(A)
    csr.setup(A)
    got = {lvl.A.format for lvl in auto.levels}
    assert "dia" in got and got <= formats and {lvl.A.format for lvl in csr.levels} == {"csr"}
    for la, lc in zip(auto.levels, csr.levels):
        a, c = _level_scipy(la.A), _level_scipy(lc.A)
        assert abs(a - c).max() == 0.0
        if la.A.format == "dia":
            assert la.A.nbytes < lc.A.nbytes
    v = np.random.default_rng(5).standard_normal(A.n)
    za, zc = _apply(auto, A, v), _apply(csr, A, v)
    tol = 1e-13 if hierarchy == "fp64" else 1e-5
    assert np.linalg.norm(za - zc) <= tol * np.linalg.norm(zc)
    (_, ra), (_, rc) = (solve(A, P.b, preconditioner=pc, rtol=1e-10) for pc in (auto, csr))
    assert ra.converged and ra.iterations == rc.iterations



def test_odd_grid_continues_with_aggregation_below_the_geometric_levels():
    P = tp.poisson_p1(2 * 2 * 25)        # 100 cells: halves twice (50, 25), then aggregation
    x, rep = solve(P.A, P.b, preconditioner=_pc(P, "mg", coarse_size=50), rtol=1e-10)
    kinds = rep.preconditioner["level_kinds"]
    assert kinds[:2] == ["geometric", "geometric"] and "aggregation" in kinds and kinds[-1] == "direct"
    assert rep.converged and rep.iterations <= 15


def rep_pc(P):
    pc = _pc(P)
    pc.setup(prepare_matrix(P.A))
    return pc


def test_report_fields():
    P = tp.poisson_fd(63)
    x, rep = solve(P.A, P.b, preconditioner=_pc(P), rtol=1e-10)
    info = rep.preconditioner
    assert info["levels"] == len(info["rows"]) == len(info["nnz"]) >= 3
    assert info["rows"][0] == P.n and all(a > b for a, b in zip(info["rows"], info["rows"][1:]))
    assert 1.0 < info["operator_complexity"] < 1.6 and 1.0 < info["grid_complexity"] < 1.4
    assert info["cycles"] >= rep.iterations
    assert info["setup_time_s"] > 0
    assert all(1.5 < lam < 2.3 for lam in info["lambda_max"])     # lambda_max(D^-1 A) of the Laplacian ~ 2
    times = rep_pc(P).time_levels(repeat=2)
    assert len(times) == info["levels"] and all(t > 0 for t in times)
    assert rep.method.endswith("+mg")


def test_standard_pcg_beta_also_converges_with_a_symmetric_fp64_hierarchy():
    P = tp.poisson_fd(63)
    x, rep = solve(P.A, P.b, preconditioner=_pc(P, hierarchy="fp64", flexible=False), rtol=1e-10)
    x2, rep2 = solve(P.A, P.b, preconditioner=_pc(P, hierarchy="fp64"), rtol=1e-10)
    assert rep.converged and rep2.converged
    assert abs(rep.iterations - rep2.iterations) <= 1


def test_hierarchy_is_reused_for_a_prepared_matrix():
    P = tp.poisson_fd(31)
    A = prepare_matrix(P.A)
    pc = _pc(P)
    solve(A, P.b, preconditioner=pc, rtol=1e-10)
    levels = pc.levels
    x, rep = solve(A, 2 * P.b, preconditioner=pc, rtol=1e-10)
    assert pc.levels is levels and rep.converged


@pytest.mark.parametrize("options,field", [
    ({"hierarchy": "fp8"}, "multigrid.hierarchy"), ({"degree": 0}, "multigrid.degree"),
    ({"smoother": "gauss-seidel"}, "multigrid.smoother"), ({"coarse_size": 2.5}, "multigrid.coarse_size"),
    ({"bogus": 1}, "multigrid.bogus"), ({"amg": "ml"}, "multigrid.amg"), ({"flexible": "yes"}, "multigrid.flexible"),
])
def test_bad_options_are_refused_naming_the_field(options, field):
    P = tp.poisson_fd(7)
    with pytest.raises(CaseError) as e:
        solve(P.A, P.b, preconditioner="amg", multigrid=options)
    assert field in str(e.value)


def test_mg_needs_a_grid_and_pcg_jacobi_refuses_another_preconditioner():
    P = tp.poisson_fd(7)
    with pytest.raises(CaseError, match="structured"):
        solve(P.A, P.b, preconditioner="mg")
    with pytest.raises(CaseError, match="pcg-jacobi"):
        solve(P.A, P.b, method="pcg-jacobi", preconditioner="amg")
    with pytest.raises(CaseError, match="multigrid"):
        solve(P.A, P.b, preconditioner="jacobi", multigrid={"degree": 3})


def test_amg_on_the_api_with_any_matrix_and_ruge_stueben():
    P = tp.anisotropic(32)
    ref = spla.spsolve(P.A.tocsc(), P.b)
    for method in ("sa", "rs"):
        x, rep = solve(P.A, P.b, preconditioner="amg", multigrid={"amg": method}, rtol=1e-10)
        assert rep.converged and np.linalg.norm(x - ref) / np.linalg.norm(ref) < 1e-8
        assert rep.preconditioner["amg"] == method


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cupy", "numba-cuda"])
@pytest.mark.parametrize("kind,hierarchy", [("mg", "fp64"), ("mg", "fp32"), ("mg", "fp16"), ("amg", "fp32")])
def test_gpu_agrees_with_numpy(backend, kind, hierarchy):
    from hpcsolve.core import backends

    if not backends.probe(backend).available:
        pytest.skip(backends.probe(backend).reason)
    P = tp.poisson_fd(63) if kind == "mg" else tp.anisotropic(64)
    # one set-up on both sides (pyamg's): the device set-up (sa_device) is compared with its NumPy run in
    # tests/fem/test_sa_device.py; here the levels' kernels are
    opts = {"hierarchy": hierarchy, **({"amg_setup": "pyamg"} if kind == "amg" else {})}
    x_np, rep_np = solve(P.A, P.b, preconditioner=_pc(P, kind, **opts), rtol=1e-10)
    x, rep = solve(P.A, P.b, backend=backend, preconditioner=_pc(P, kind, **opts), rtol=1e-10)
    assert rep.converged and rep.true_residual <= 1e-10
    assert abs(rep.iterations - rep_np.iterations) <= 1
    assert np.linalg.norm(x - x_np) / np.linalg.norm(x_np) < 1e-8
    assert rep.preconditioner["levels"] == rep_np.preconditioner["levels"]
    assert rep.preconditioner["lambda_max"] == pytest.approx(rep_np.preconditioner["lambda_max"], rel=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cupy", "numba-cuda"])
def test_gpu_elasticity_mg_with_rigid_body_modes_agrees_with_numpy(backend):
    """Geometric levels built on the device, then aggregation with the injected rigid-body modes (the
    modes are carried down by host indexing of device-built coarse grids)."""
    from hpcsolve.core import backends

    if not backends.probe(backend).available:
        pytest.skip(backends.probe(backend).reason)
    P = tp.cook(68)                     # halves twice (34, 17), then aggregation
    opts = {"coarse_size": 100, "hierarchy": "fp32"}
    x_np, rep_np = solve(P.A, P.b, preconditioner=_pc(P, "mg", **opts), rtol=1e-10)
    x, rep = solve(P.A, P.b, backend=backend, preconditioner=_pc(P, "mg", **opts), rtol=1e-10)
    assert rep.preconditioner["level_kinds"][:3] == ["geometric", "geometric", "aggregation"]
    assert rep.converged and rep.true_residual <= 1e-10 and abs(rep.iterations - rep_np.iterations) <= 1
    assert np.linalg.norm(x - x_np) / np.linalg.norm(x_np) < 1e-8


def _device_vs_host_build(backend, P, monkeypatch, **opts):
    """Solve with every geometric level built where the matrix lives (host_build_rows 0), then with every level
    built on the host; the hierarchies and solves must agree."""
    out = []
    for rows in (0, 1 << 40):
        monkeypatch.setattr(hmod.HierarchyBuilder, "host_build_rows", rows)
        monkeypatch.setattr(GeometricBuilder, "host_products_rows", rows)
        x, rep = solve(P.A, P.b, backend=backend, preconditioner=_pc(P, "mg", hierarchy="fp64", **opts), rtol=1e-10)
        out.append((x, rep))
    (x0, r0), (x1, r1) = out
    assert r0.preconditioner["rows"] == r1.preconditioner["rows"] and r0.preconditioner["nnz"] == r1.preconditioner["nnz"]
    assert r0.preconditioner["lambda_max"] == pytest.approx(r1.preconditioner["lambda_max"], rel=1e-9)
    assert r0.converged and r1.converged and r0.iterations == r1.iterations
    assert np.linalg.norm(x0 - x1) / np.linalg.norm(x1) < 1e-9


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cupy", "numba-cuda"])
@pytest.mark.parametrize("make", [lambda: tp.poisson_fd(255), lambda: tp.cook(64)])
def test_gpu_levels_built_on_the_device_equal_levels_built_on_the_host(backend, make, monkeypatch):
    from hpcsolve.core import backends

    if not backends.probe(backend).available:
        pytest.skip(backends.probe(backend).reason)
    _device_vs_host_build(backend, make(), monkeypatch, coarse_size=50)


@pytest.mark.cudasim
def test_numba_levels_built_through_device_products_equal_host_ones_under_the_simulator(monkeypatch):
    _device_vs_host_build("numba-cuda", tp.poisson_fd(15), monkeypatch, coarse_size=10)


def test_small_levels_built_on_the_host_give_the_same_lambda_max():
    """The host power iteration of a small level equals the low-ops one on the NumPy backend."""
    P = tp.poisson_fd(31)
    pc = _pc(P, hierarchy="fp64", coarse_size=10)
    x, rep = solve(P.A, P.b, preconditioner=pc, rtol=1e-10)
    low = prepare_matrix(P.A).low
    for lvl, lam in zip(pc.levels, rep.preconditioner["lambda_max"]):
        assert lambda_max(low, lvl, pc.options.power_iterations) == pytest.approx(lam, rel=1e-12)
    assert 1.5 < rep.preconditioner["lambda_max"][0] <= 2.0


@pytest.mark.cudasim
@pytest.mark.parametrize("kind,hierarchy", [("mg", "fp32"), ("mg", "fp16"), ("amg", "fp64")])
def test_numba_vcycle_under_the_simulator_agrees_with_numpy(kind, hierarchy):
    P = tp.poisson_fd(15)
    x_np, rep_np = solve(P.A, P.b, preconditioner=_pc(P, kind, hierarchy=hierarchy, coarse_size=20), rtol=1e-10)
    x, rep = solve(P.A, P.b, backend="numba-cuda", preconditioner=_pc(P, kind, hierarchy=hierarchy, coarse_size=20),
                   rtol=1e-10)
    assert rep.converged and abs(rep.iterations - rep_np.iterations) <= 1
    assert np.linalg.norm(x - x_np) / np.linalg.norm(x_np) < 1e-8
    assert rep.preconditioner["levels"] == rep_np.preconditioner["levels"] >= 3


@pytest.mark.parametrize("make", [lambda: tp.poisson_fd(15), lambda: tp.jumps(16, 1e6), lambda: tp.cook(8),
                                  lambda: tp.anisotropic(12)])
def test_galerkin_by_probing_equals_the_sparse_triple_product(make):
    P = make()
    Pm, cgrid, cindex = geometric_prolongation(P.grid)
    R = Pm.T.tocsr()
    probed = galerkin_by_probing(low_ops(), P.A, Pm, R, cgrid, cindex)
    exact = (R @ P.A @ Pm).tocsr()
    assert probed.shape == exact.shape
    assert abs(probed - exact).max() <= 1e-13 * abs(exact).max()
    assert probed.has_sorted_indices and probed.nnz <= exact.nnz


@pytest.mark.parametrize("make", [lambda: tp.poisson_fd(15), lambda: tp.cook(8)])
def test_probing_in_blocks_equals_probing_one_vector_at_a_time(make):
    """The block products (the GPU's path: 3 SpMM a component) and the one-probe-at-a-time products through the low
    ops (host matrices with device ops) give the same probe results."""
    from hpcsolve.fem.linalg.precond import geometric as geo

    P = make()
    Pm, cgrid, _ = geometric_prolongation(P.grid)
    R = Pm.T.tocsr()
    free = cgrid.free_array(np)
    node, comp = free // cgrid.ncomp, free % cgrid.ncomp
    color = (node % (cgrid.nx + 1)) % 3 + 3 * ((node // (cgrid.nx + 1)) % 3)
    blocks = geo._probe_blocks(P.A, Pm, R, color, comp, cgrid.ncomp, 9, np)
    single = geo._probe_one_by_one(low_ops(), P.A, Pm, R, color, comp, cgrid.ncomp, 9, np)
    assert blocks.shape == single.shape == (9 * cgrid.ncomp, free.size)
    assert np.abs(blocks - single).max() <= 1e-14 * np.abs(single).max()
    assert np.count_nonzero(single) > free.size         # probes that hold entries, not zeros compared with zeros


class _CountingOps:
    """Low ops that count their host synchronizations (to_host)."""

    def __init__(self, low):
        self._low, self.syncs = low, 0

    def __getattr__(self, name):
        return getattr(self._low, name)

    def to_host(self, a):
        self.syncs += 1
        return self._low.to_host(a)


def test_the_device_power_iteration_gives_the_host_estimate_with_four_synchronizations():
    """15 power steps normalized every 5 and around the last (cycle.NORMALIZE_EVERY): the host's estimate, which
    normalizes at every step, to rounding; 4 host synchronizations, not 15."""
    from hpcsolve.fem.linalg.precond.cycle import lambda_max_host

    P = tp.jumps(32, 1e3)
    pc = _pc(P, hierarchy="fp64", coarse_size=10)
    A = prepare_matrix(P.A)
    pc.setup(A)
    low = _CountingOps(A.low)
    lam = lambda_max(low, pc.levels[0], 15)
    assert lam == pytest.approx(lambda_max_host(sp.csr_matrix(P.A), 15), rel=1e-12)
    assert low.syncs == 4
    assert 1.5 < lam < 2.0
    # every level at once: each level's own estimate, still 4 synchronizations
    from hpcsolve.fem.linalg.precond.cycle import lambda_max_levels

    low.syncs = 0
    together = lambda_max_levels(low, pc.levels, 15)
    assert low.syncs == 4 and len(pc.levels) >= 3
    assert together == pytest.approx([lambda_max(A.low, lvl, 15) for lvl in pc.levels], rel=1e-12)
    assert together[0] == pytest.approx(lam, rel=1e-12)
    for name in ("b", "x0", "x1", "d", "r"):     # buffers a diverged solve left NaN: the estimate does not read them
        pc.levels[0].bufs[name][:] = np.nan
    assert lambda_max(A.low, pc.levels[0], 15) == pytest.approx(lam, rel=1e-12)


class _Twinned(_CountingOps):
    """Low ops whose ``launch_twin`` hands the power iteration to a second ops object (counting its launches)
    with arrays seen through ``np.ndarray.view``, as Numba-CUDA hands it to CuPy's kernels on its own stream."""

    def __init__(self, low):
        super().__init__(low)
        self.twin, self.viewed, self.own_smooths = _CountingOps(low), [], 0
        self.twin.smooths = 0
        twin_smooth = low.mg_smooth

        def counted(*args):
            self.twin.smooths += 1
            return twin_smooth(*args)

        self.twin.mg_smooth = counted

    def mg_smooth(self, *args):
        self.own_smooths += 1
        return self._low.mg_smooth(*args)

    def launch_twin(self):
        def view(a):
            self.viewed.append(a)
            return a.view()
        return self.twin, view


@pytest.mark.parametrize("kind", ["mg", "amg"])
def test_the_power_iteration_runs_on_the_launch_twin_with_the_same_estimates(kind):
    """``LowOps.launch_twin``: every level's power iteration on the twin's kernels, through views of the same
    memory (geometric levels stored by diagonals, aggregation levels CSR), the estimates those of the backend's own
    launches, bit for bit; none of the backend's own launches."""
    from hpcsolve.fem.linalg.precond.cycle import lambda_max_levels

    P = tp.poisson_fd(31)
    pc = _pc(P, kind, hierarchy="fp64" if kind == "mg" else "fp16", coarse_size=10,
             level_format="dia" if kind == "mg" else "csr")
    A = prepare_matrix(P.A)
    pc.setup(A)
    own = lambda_max_levels(A.low, pc.levels, 15)
    low = _Twinned(A.low)
    assert lambda_max_levels(low, pc.levels, 15) == own
    assert low.own_smooths == 0 and low.twin.smooths == 15 * len(pc.levels) and low.twin.syncs == 4
    assert any(lvl.A.offsets is not None for lvl in pc.levels) == (kind == "mg")
    viewed = {id(a) for a in low.viewed}
    for lvl in pc.levels:
        M = lvl.A
        arrays = [M.vals, lvl.dinv, *lvl.bufs.values()] + [a for a in (M.indptr, M.indices, M.offsets, M.rowscale)
                                                             if a is not None]
        assert {id(a) for a in arrays} <= viewed
    assert any(lvl.A.rowscale is not None for lvl in pc.levels) == (kind == "amg")     # (16-bit: row scales)


def test_the_diagonal_ratio_is_reduced_where_the_matrix_lives():
    P = tp.jumps(16, 1e6)
    d = sp.csr_matrix(P.A).diagonal()
    assert hmod._diagonal_ratio(prepare_matrix(P.A)) == pytest.approx(d.max() / d.min(), rel=1e-12)
    assert d.max() / d.min() > 1e5


def test_a_grid_without_free_list_means_dirichlet_all_round():
    P = tp.poisson_fd(15)
    g = StructuredGrid(16, 16, None)
    assert np.array_equal(g.free_array(), P.grid.free)


@pytest.mark.parametrize("overrides,expected", [
    ([], "jacobi"),                                                  # 65^2 nodes: below the threshold
    (["mesh.nx=480"], "mg"),                                         # 481^2 nodes, structured generator mesh
    (["mesh.nx=64", "mesh.refine=3"], "amg"),                        # refined: no grid numbering
    (["mesh.nx=480", "solve.method=pcg-jacobi"], "jacobi"),
    (["mesh.nx=480", "solve.preconditioner=none"], "none"),
    (["solve.preconditioner=amg"], "amg"),
])
def test_auto_preconditioner_choice(overrides, expected):
    from hpcsolve.core.cases import load_case
    from hpcsolve.fem.choices import AUTO_MULTIGRID_UNKNOWNS, preconditioner_name
    from hpcsolve.core.precision import get_precision

    case = load_case("cases/poisson_manufactured.toml", overrides)
    name = preconditioner_name(case, None, get_precision("fp64", family="fem"))
    assert name == expected
    assert 481 ** 2 > AUTO_MULTIGRID_UNKNOWNS > 65 ** 2


def test_mg_on_a_file_mesh_is_a_case_error_naming_the_field():
    from hpcsolve.core.cases import load_case
    from hpcsolve.fem.runner import make_preconditioner
    from hpcsolve.fem.discrete import problem as prob
    from hpcsolve.core.precision import get_precision

    case = load_case("cases/heat_plate_with_hole.toml", ["solve.preconditioner=mg"])
    with pytest.raises(CaseError, match="solve.preconditioner"):
        make_preconditioner(case, prob.build(case), get_precision("fp64", family="fem"))


def test_case_run_with_mg_reports_the_hierarchy(tmp_path):
    from hpcsolve.core.cases import load_case
    from hpcsolve.fem.runner import run
    from hpcsolve.core.precision import get_precision

    case = load_case("cases/poisson_manufactured.toml", ["solve.preconditioner=mg", "solve.multigrid.hierarchy=fp16"])
    res = run(case, "numpy", get_precision("fp64", family="fem"))
    m = res.metrics
    assert m["preconditioner"] == "mg" and m["converged"]
    assert m["preconditioner_info"]["hierarchy"] == "fp16" and m["preconditioner_info"]["levels"] >= 2
    assert m["iterations"] <= 12
    assert m["error_vs_fp64_reference"] < 1e-8
    assert res.timings["solver_s"] >= res.timings["solve_s"] + res.timings["preconditioner_setup_s"] - 1e-12


def test_repeated_solves_keep_one_engine_and_one_hierarchy_per_matrix():
    P = tp.poisson_fd(31)
    A = prepare_matrix(P.A)
    for _ in range(4):                                   # a new preconditioner object each call
        x, rep = solve(A, P.b, preconditioner="amg", rtol=1e-10)
        assert rep.converged
    engines = [k for k in A.cache if isinstance(k, tuple) and k[:1] == ("cg-engine",)]
    hierarchies = [k for k in A.cache if isinstance(k, tuple) and k[:1] == ("multigrid",)]
    assert len(engines) == 1 and len(hierarchies) == 1
    for _ in range(3):                                   # a new grid object each call: rebuilt, not piled up
        x, rep = solve(A, P.b, preconditioner=mgm.Multigrid("mg", grid=tp.poisson_fd(31).grid), rtol=1e-10)
        assert rep.converged
    engines = [k for k in A.cache if isinstance(k, tuple) and k[:1] == ("cg-engine",)]
    hierarchies = [k for k in A.cache if isinstance(k, tuple) and k[:1] == ("multigrid",)]
    assert len(engines) == 1 and len(hierarchies) == 2        # one amg, one mg


def test_a_hierarchy_is_not_reused_for_another_near_nullspace():
    P = tp.cook(24)
    A = prepare_matrix(P.A)
    one = mgm.Multigrid("amg", near_nullspace=np.ones((P.n, 1)))
    one.setup(A)
    rows_one = one.info()["rows"]
    three = mgm.Multigrid("amg", near_nullspace=P.near_nullspace)
    three.setup(A)
    assert three.levels is not one.levels and three.info()["rows"] != rows_one


def test_elasticity_mg_carries_the_rigid_body_modes_to_the_aggregation_levels():
    P = tp.cook(33)                     # odd: no geometric level, aggregation from the top
    with_modes = mgm.Multigrid("mg", grid=P.grid, near_nullspace=P.near_nullspace)
    x, rep = solve(P.A, P.b, preconditioner=with_modes, rtol=1e-10)
    x2, rep2 = solve(P.A, P.b, preconditioner=mgm.Multigrid("mg", grid=P.grid), rtol=1e-10)
    assert rep.converged and rep.iterations < 0.5 * rep2.iterations
    P = tp.cook(34)                     # halves once (17), then aggregation with the injected modes
    pc = mgm.Multigrid("mg", {"coarse_size": 100}, grid=P.grid, near_nullspace=P.near_nullspace)
    x, rep = solve(P.A, P.b, preconditioner=pc, rtol=1e-10)
    assert rep.preconditioner["level_kinds"][:2] == ["geometric", "aggregation"] and rep.converged
    assert rep.iterations <= 90


@pytest.mark.parametrize("conductivity", [1e-40, 1e40])
@pytest.mark.parametrize("hierarchy", ["fp32", "fp16"])
def test_low_precision_hierarchies_take_matrices_outside_float32_range(conductivity, hierarchy):
    P = tp.poisson_fd(31)
    x, rep = solve(P.A * conductivity, P.b, preconditioner=_pc(P, hierarchy=hierarchy), rtol=1e-10)
    assert rep.converged and rep.iterations <= 12


def test_a_coarsest_level_too_large_for_a_dense_solve_is_refused():
    P = tp.poisson_fd(255)
    with pytest.raises(CaseError, match="multigrid.max_levels"):
        solve(P.A, P.b, preconditioner=_pc(P, max_levels=2, coarse_size=400), rtol=1e-10)


@pytest.mark.parametrize("grid,match", [
    (lambda P: StructuredGrid(16, 16, None), "grid"),
    (lambda P: StructuredGrid(32, 16, P.grid.free), "grid"),
])
def test_a_grid_that_does_not_fit_the_matrix_is_a_case_error(grid, match):
    P = tp.poisson_fd(31)
    with pytest.raises(CaseError, match=match):
        solve(P.A, P.b, preconditioner=mgm.Multigrid("mg", grid=grid(P)), rtol=1e-10)
    with pytest.raises(CaseError, match="multigrid"):
        solve(P.A, P.b, preconditioner="amg", multigrid="fp16")


def _rho_by_arpack(A, dinv) -> float:
    """rho(D^-1 A) as the largest eigenvalue of the similar symmetric D^-1/2 A D^-1/2, by ARPACK (implicitly
    restarted, converged to 1e-13): an independent reference in well under a second where the dense nonsymmetric
    eigvals of a 4096^2 matrix took minutes."""
    import scipy.sparse as sp

    s = sp.diags(np.sqrt(dinv))
    return float(spla.eigsh(sp.csr_matrix(s @ A @ s), k=1, which="LA", tol=1e-13, return_eigenvectors=False,
                            v0=np.ones(A.shape[0]))[0])


@pytest.mark.parametrize("make,exact", [
    # the 5-point Laplacian on m^2 nodes: D^-1 A = I - (cos(a pi h) + cos(b pi h)) / 2, rho = 1 + cos(pi / (m + 1))
    (lambda: tp.poisson_fd(63), lambda A, dinv: 1.0 + np.cos(np.pi / 64)),
    (lambda: tp.anisotropic(64), _rho_by_arpack), (lambda: tp.jumps(64, 1e6), _rho_by_arpack),
    (lambda: tp.cook(16), _rho_by_arpack)], ids=["poisson", "anisotropic", "jumps", "cook"])
def test_lanczos_rho_of_dinv_a_is_within_a_percent_and_never_above(make, exact):
    import scipy.sparse as sp

    A = sp.csr_matrix(make().A)
    dinv = 1.0 / A.diagonal()
    rho = exact(A, dinv)
    est = rho_dinv_a(A, dinv)
    assert rho * 0.99 <= est <= rho * (1 + 1e-12)


def test_the_arpack_reference_is_the_dense_spectral_radius_on_a_small_matrix():
    import scipy.sparse as sp

    A = sp.csr_matrix(tp.cook(4).A)
    dinv = 1.0 / A.diagonal()
    dense = float(np.max(np.abs(np.linalg.eigvals(dinv[:, None] * A.toarray()))))
    assert _rho_by_arpack(A, dinv) == pytest.approx(dense, rel=1e-12)


@pytest.mark.parametrize("make", [lambda: tp.poisson_fd(63), lambda: tp.cook(16), lambda: tp.jumps(64, 1e6)])
def test_smoothed_aggregation_is_pyamgs_hierarchy(make):
    """Same aggregates, candidates and Galerkin levels as pyamg's default smoothed_aggregation_solver; P differs
    through the rho(D^-1 A) estimate (Lanczos against pyamg's randomly started Arnoldi) and, on coarse levels,
    the odd aggregate tie broken by rounding, so: the two finest levels within a percent or two, the same level
    sizes and operator complexity."""
    import pyamg
    import scipy.sparse as sp

    P = make()
    A = sp.csr_matrix(P.A)
    pairs, coarse = sa_levels(A, MGOptions(coarse_size=50), P.near_nullspace)
    np.random.seed(0)
    ml = pyamg.smoothed_aggregation_solver(A, B=P.near_nullspace, max_coarse=50, keep=False)
    ours = [Al for Al, _ in pairs] + [coarse]
    theirs = [sp.csr_matrix(lvl.A) for lvl in ml.levels]
    k = min(len(ours), len(theirs))          # pyamg counts coarse_size in blocks of the near-null space
    assert [M.shape[0] for M in ours[:k]] == [M.shape[0] for M in theirs[:k]] and k >= 2
    nnz = lambda mats: sum(M.nnz for M in mats[:k]) / mats[0].nnz
    assert nnz(ours) == pytest.approx(nnz(theirs), rel=0.02)
    for l, tol in ((0, 0.01), (1, 0.02))[:k - 1]:
        ref = sp.csr_matrix(ml.levels[l].P)
        assert spla.norm(pairs[l][1] - ref) <= tol * spla.norm(ref)
        assert spla.norm(ours[l + 1] - theirs[l + 1]) <= tol * spla.norm(theirs[l + 1])
