"""Numba-CUDA FEM kernels under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1, scripts/test.sh) on a
6 x 6 Poisson system (36 unknowns): the fused device CG and the Ops seam against SciPy fp64."""

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from fem_problems import poisson2d

pytestmark = pytest.mark.cudasim


@pytest.fixture(scope="module")
def tiny():
    A = poisson2d(6)
    b = np.random.default_rng(7).standard_normal(A.shape[0])
    return A, b, spla.spsolve(A.tocsc(), b)


def _rel(x, y):
    return float(np.linalg.norm(x - y) / np.linalg.norm(y))


@pytest.mark.parametrize("precision,method", [("fp64", "cg"), ("fp64", "pcg-jacobi"), ("mixed", "cg-reliable"),
                                              ("mixed", "ir-restarted")])
def test_fused_numba_matches_scipy(tiny, precision, method):
    from hpcsolve.fem import kernels_numba

    A, b, x_ref = tiny
    x, rep = kernels_numba.solve_fused(A, b, precision=precision, method=method, rtol=1e-10, check_every=4,
                                       maxiter=200)
    print(f"\n{precision}/{method}: its {rep.iterations} true {rep.true_residual:.2e} err {_rel(x, x_ref):.2e}")
    assert rep.converged, rep.reason
    assert rep.true_residual <= 1e-10
    assert _rel(x, x_ref) < 1e-9        # kappa of this system is 21.5: err <= kappa * 1e-10


def test_fused_numba_fp32_stalls_above_fp64(tiny):
    from hpcsolve.fem import kernels_numba

    A, b, x_ref = tiny
    x, rep = kernels_numba.solve_fused(A, b, precision="fp32", rtol=1e-12, check_every=4, maxiter=200)
    print(f"\nfp32: its {rep.iterations} true residual floor {rep.true_residual:.2e} err {_rel(x, x_ref):.2e}")
    assert not rep.converged
    assert 1e-12 < rep.true_residual < 1e-5     # float32: about kappa * u_32 = 1.3e-6 at most
    assert _rel(x, x_ref) < 1e-5


def test_seam_numba_runs_krylov_algorithm(tiny):
    from hpcsolve.fem import solve

    A, b, x_ref = tiny
    x, rep = solve(A, b, precision="mixed", method="cg-reliable", backend="numba-cuda", rtol=1e-10, check_every=4,
                   device_path="seam")
    print(f"\nseam mixed cg-reliable: its {rep.iterations} true {rep.true_residual:.2e} err {_rel(x, x_ref):.2e}")
    assert rep.backend == "numba-cuda"
    assert rep.converged, rep.reason
    assert _rel(x, x_ref) < 1e-9


def test_solve_api_takes_the_fused_path_on_numba_cuda(tiny):
    from hpcsolve.fem import solve

    A, b, x_ref = tiny
    x, rep = solve(A, b, precision="fp64", backend="numba-cuda", rtol=1e-10, check_every=4)
    assert any("fused device CG" in n for n in rep.notes), rep.notes
    assert rep.converged and _rel(x, x_ref) < 1e-9
