"""GPU conjugate gradients (CuPy and Numba-CUDA, fused and through the Ops seam) against SciPy fp64.

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

from hpcsolve.cases import load_case
from hpcsolve.fem import problem, solve

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


def _fused(backend):
    if backend == "cupy":
        from hpcsolve.fem import kernels_cupy as k
    else:
        from hpcsolve.fem import kernels_numba as k
    return k.solve_fused


def _rel(x, x_ref):
    return float(np.linalg.norm(x - x_ref) / np.linalg.norm(x_ref))


CASES_METHODS = [("fp64", "cg"), ("mixed", "cg-reliable"), ("mixed", "ir-restarted")]


@pytest.mark.parametrize("name", ["poisson", "cook"])
@pytest.mark.parametrize("precision,method", CASES_METHODS)
@pytest.mark.parametrize("path", ["fused", "seam", "api"])
def test_reaches_fp64_accuracy(systems, gpu_backend_names, name, precision, method, path, record_property):
    A, b, x_ref = systems[name]
    pre = "jacobi" if name == "cook" else "none"
    for backend in gpu_backend_names:
        if path == "api":  # hpcsolve.fem.solve on a GPU backend takes the fused path by default
            x, rep = solve(A, b, precision=precision, backend=backend, method=method, rtol=RTOL, maxiter=40_000,
                           preconditioner=pre)
            assert any("fused device CG" in n for n in rep.notes), rep.notes
        elif path == "fused":
            x, rep = _fused(backend)(A, b, precision=precision, method=method, rtol=RTOL, maxiter=40_000,
                                     preconditioner=pre, check_every=32)
        else:
            x, rep = solve(A, b, precision=precision, backend=backend, method=method, rtol=RTOL, maxiter=40_000,
                           preconditioner=pre, device_path="seam")
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
        x64, r64 = _fused(backend)(A, b, precision="fp64", rtol=RTOL, maxiter=40_000, preconditioner=pre)
        x32, r32 = _fused(backend)(A, b, precision="fp32", rtol=RTOL, maxiter=40_000, preconditioner=pre)
        err = _rel(x32, x_ref)
        print(f"\n{name} {backend} fp32 floor: true residual {r32.true_residual:.2e} (fp64 {r64.true_residual:.2e}), "
              f"error {err:.2e}, kappa {r64.kappa_estimate:.2e}, kappa*u32 {r64.kappa_estimate * U32:.2e}; {r32.reason}")
        record_property(f"{backend}_fp32_true_residual_floor", r32.true_residual)
        record_property(f"{backend}_fp32_error", err)
        assert not r32.converged
        assert r32.true_residual > r64.true_residual
        assert err <= 10 * r64.kappa_estimate * U32


def test_graphs_and_no_graphs_agree(systems):
    from hpcsolve.backends import probe
    from hpcsolve.fem import kernels_cupy

    if not probe("cupy").available:
        pytest.skip("cupy not usable")
    A, b, x_ref = systems["poisson"]
    xg, rg = kernels_cupy.solve_fused(A, b, precision="fp64", rtol=RTOL, graphs=True)
    xn, rn = kernels_cupy.solve_fused(A, b, precision="fp64", rtol=RTOL, graphs=False)
    assert abs(rg.iterations - rn.iterations) <= 32
    assert _rel(xg, xn) < 1e-8


def test_cupy_and_numba_kernels_agree_on_one_spmv_dot(systems, gpu_backend_names):
    if len(gpu_backend_names) < 2:
        pytest.skip("needs both GPU backends")
    from hpcsolve.fem import kernels_cupy, kernels_numba

    A, b, _ = systems["poisson"]
    p = np.random.default_rng(3).standard_normal(A.shape[0])
    ref = A @ p
    for k in (kernels_cupy, kernels_numba):
        for dt, tol in ((np.float64, 1e-13), (np.float32, 1e-6)):
            ops = k.make_ops(A, dt)
            pv, qv = ops.vector(p), ops.vector()
            pq = ops.to_float(ops.spmv_dot(pv, qv))
            q = ops.to_host(qv).astype(np.float64)
            assert np.linalg.norm(q - ref) / np.linalg.norm(ref) < tol
            assert abs(pq - p @ ref) / abs(p @ ref) < tol
