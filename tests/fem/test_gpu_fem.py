"""GPU conjugate gradients (CuPy and Numba-CUDA: the one CG of hpcsolve.fem.linalg.cg on their low ops, from a
host matrix and from a prepared one) against SciPy fp64.

Problems: the manufactured Poisson case (mesh.nx = 128: 16,129 unknowns) and Cook's membrane
(mesh.nx = 32: 2,112 unknowns, Jacobi-PCG), both from the case files. Bounds, with x* the SciPy
spsolve solution and kappa the Lanczos estimate the solver reports:
- fp64 and mixed (both strategies) reach the float64 true residual 1e-10 and
  ||x - x*|| / ||x*|| <= kappa * 1e-10 * 2 (the relative error a relative residual 1e-10 permits);
- fp32 stalls: its true residual floor is above fp64's (reported), and its error stays within
  10 * kappa * u_32 (u_32 = 6e-8).
"""

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from hpcsolve.core.cases import load_case
from hpcsolve.fem import prepare_matrix, solve
from hpcsolve.fem.discrete import problem

pytestmark = pytest.mark.gpu
CASES = Path(__file__).resolve().parents[2] / "cases"
RTOL = 1e-10
U32 = 2.0 ** -24


@pytest.fixture(scope="module")
def systems():
    out = {}
    for name, case, over in (("poisson", "poisson_manufactured.toml", ["mesh.nx=128"]),
                             ("cook", "cook_membrane.toml", ["mesh.nx=32"])):
        disc = problem.build(load_case(CASES / case, over))
        x_ref = spla.spsolve(disc.A.tocsc(), disc.b)
        out[name] = (disc.A, disc.b, x_ref)
    return out


def _rel(x, x_ref):
    return float(np.linalg.norm(x - x_ref) / np.linalg.norm(x_ref))


CASES_METHODS = [("fp64", "cg"), ("mixed", "cg-reliable"), ("mixed", "ir-restarted")]


@pytest.mark.parametrize("name", ["poisson", "cook"])
@pytest.mark.parametrize("precision,method", CASES_METHODS)
@pytest.mark.parametrize("path", ["host", "prepared"])
def test_reaches_fp64_accuracy(systems, gpu_backend_names, name, precision, method, path, record_property):
    A, b, x_ref = systems[name]
    pre = "jacobi" if name == "cook" else "none"
    for backend in gpu_backend_names:
        M = A if path == "host" else prepare_matrix(A, backend=backend)
        x, rep = solve(M, b, precision=precision, backend=backend, method=method, rtol=RTOL, maxiter=40_000,
                       preconditioner=pre, check_every=64 if path == "host" else 32)
        assert any(f"fused device CG on {backend}" in n for n in rep.notes), rep.notes
        assert rep.backend == backend
        err = _rel(x, x_ref)
        bound = 2 * max(rep.kappa_estimate, 1.0) * RTOL
        print(f"\n{name} {backend} {path} {precision}/{method}: its {rep.iterations} outer {rep.outer_iterations} "
              f"true {rep.true_residual:.2e} err {err:.2e} (bound {bound:.1e}) kappa {rep.kappa_estimate:.2e} "
              f"{rep.fallback}")
        record_property(f"{backend}_{path}_{precision}_{method}_err", err)
        assert rep.converged, rep.reason
        assert rep.true_residual <= RTOL
        assert err <= bound


@pytest.mark.parametrize("name", ["poisson", "cook"])
def test_fp32_floor_is_reported_and_within_kappa_u32(systems, gpu_backend_names, name, record_property):
    A, b, x_ref = systems[name]
    pre = "jacobi" if name == "cook" else "none"
    for backend in gpu_backend_names:
        M = prepare_matrix(A, backend=backend)
        x64, r64 = solve(M, b, precision="fp64", rtol=RTOL, maxiter=40_000, preconditioner=pre)
        x32, r32 = solve(M, b, precision="fp32", rtol=RTOL, maxiter=40_000, preconditioner=pre)
        err = _rel(x32, x_ref)
        print(f"\n{name} {backend} fp32 floor: true residual {r32.true_residual:.2e} (fp64 {r64.true_residual:.2e}), "
              f"error {err:.2e}, kappa {r64.kappa_estimate:.2e}, kappa*u32 {r64.kappa_estimate * U32:.2e}; {r32.reason}")
        record_property(f"{backend}_fp32_true_residual_floor", r32.true_residual)
        record_property(f"{backend}_fp32_error", err)
        assert not r32.converged
        assert r32.true_residual > r64.true_residual
        assert err <= 10 * r64.kappa_estimate * U32


def test_graphs_and_no_graphs_agree(systems):
    from hpcsolve.core.backends import probe
    from hpcsolve.fem.linalg import kernels_cupy, matrix

    if not probe("cupy").available:
        pytest.skip("cupy not usable")
    A, b, x_ref = systems["poisson"]
    xg, rg = solve(matrix.prepare(A, kernels_cupy.low_ops(graphs=True)), b, precision="fp64", rtol=RTOL)
    xn, rn = solve(matrix.prepare(A, kernels_cupy.low_ops(graphs=False)), b, precision="fp64", rtol=RTOL)
    assert "(CUDA graphs)" in rg.notes[0] and "(no graphs)" in rn.notes[0]
    assert abs(rg.iterations - rn.iterations) <= 32
    assert _rel(xg, xn) < 1e-8


def test_gpu_backends_take_the_numpy_decisions(systems, gpu_backend_names):
    """Iteration and replacement counts on the device equal those of the NumPy low ops (same kernels'
    arithmetic; only the summation order of the dot products differs)."""
    A, b, _ = systems["poisson"]
    for precision, method in (("fp64", "cg"), ("mixed", "cg-reliable"), ("mixed", "ir-restarted")):
        _, ref = solve(A, b, precision=precision, method=method, rtol=RTOL, backend="numpy")
        for backend in gpu_backend_names:
            _, rep = solve(A, b, precision=precision, method=method, rtol=RTOL, backend=backend)
            print(f"\n{precision}/{method}: numpy {ref.iterations} ({ref.outer_iterations}), {backend} "
                  f"{rep.iterations} ({rep.outer_iterations})")
            assert rep.converged and ref.converged
            assert abs(rep.iterations - ref.iterations) <= 64      # at most one block apart


def test_cupy_and_numba_kernels_agree_on_one_spmv_dot(systems, gpu_backend_names):
    if len(gpu_backend_names) < 2:
        pytest.skip("needs both GPU backends")
    A, b, _ = systems["poisson"]
    p = np.random.default_rng(3).standard_normal(A.shape[0])
    ref = A @ p
    for backend in gpu_backend_names:
        M = prepare_matrix(A, backend=backend)
        low = M.low
        for dt, tol in ((np.float64, 1e-13), (np.float32, 1e-6)):
            M.ensure(dt)
            ws = low.zeros(1, np.float64)
            pv, qv = low.to_device(p.astype(dt)), low.zeros(A.shape[0], dt)
            low.spmv_dot(M, pv, qv, ws, 0)
            pq = float(low.to_host(ws)[0])
            q = low.to_host(qv).astype(np.float64)
            assert np.linalg.norm(q - ref) / np.linalg.norm(ref) < tol
            assert abs(pq - p @ ref) / abs(p @ ref) < tol


@pytest.mark.parametrize("case", ["spd", "asymmetric", "missing_partner", "bad_diagonal", "nan"])
def test_device_check_finds_what_the_host_check_finds(systems, gpu_backend_names, case):
    """The matrix check kernel of each GPU backend against the NumPy one, on Cook's membrane (2,112 rows)."""
    import scipy.sparse as sp

    from hpcsolve.core.errors import CaseError
    from hpcsolve.fem import check_system

    A = systems["cook"][0].tolil()
    if case == "asymmetric":
        A[3, 4] = A[3, 4] + 1e-6
    elif case == "missing_partner":
        A[0, 2000] = 1e-3
    elif case == "bad_diagonal":
        A[700, 700] = -1.0
    elif case == "nan":
        A[5, 6] = np.nan
    A = sp.csr_matrix(A)
    b = np.ones(A.shape[0])
    try:
        check_system(A, b)
        host = None
    except CaseError as exc:
        host = str(exc)
    for backend in gpu_backend_names:
        if host is None:
            M = prepare_matrix(A, backend=backend)
            assert M.max_abs == pytest.approx(abs(A).max(), rel=1e-15)
            np.testing.assert_array_equal(M.low.to_host(M.dinv(np.float64)), 1.0 / A.diagonal())
        else:
            with pytest.raises(CaseError) as info:
                prepare_matrix(A, backend=backend)
            assert str(info.value) == host
    assert (host is None) == (case == "spd")
