"""Numba-CUDA FEM kernels under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1, scripts/test.sh) on a
6 x 6 Poisson system (36 unknowns): the one CG (hpcsolve.fem.linalg.cg) on NumbaOps against SciPy fp64, and
the matrix check kernel against the NumPy one."""

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
    from hpcsolve.fem import solve

    A, b, x_ref = tiny
    x, rep = solve(A, b, precision=precision, method=method, backend="numba-cuda", rtol=1e-10, check_every=4,
                   maxiter=200)
    print(f"\n{precision}/{method}: its {rep.iterations} true {rep.true_residual:.2e} err {_rel(x, x_ref):.2e}")
    assert rep.converged, rep.reason
    assert rep.true_residual <= 1e-10
    assert _rel(x, x_ref) < 1e-9        # kappa of this system is 21.5: err <= kappa * 1e-10


def test_fused_numba_fp32_stalls_above_fp64(tiny):
    from hpcsolve.fem import solve

    A, b, x_ref = tiny
    x, rep = solve(A, b, precision="fp32", backend="numba-cuda", rtol=1e-12, check_every=4, maxiter=200)
    print(f"\nfp32: its {rep.iterations} true residual floor {rep.true_residual:.2e} err {_rel(x, x_ref):.2e}")
    assert not rep.converged
    assert 1e-12 < rep.true_residual < 1e-5     # float32: about kappa * u_32 = 1.3e-6 at most
    assert _rel(x, x_ref) < 1e-5


def test_prepared_matrix_on_numba_is_reused(tiny):
    from hpcsolve.fem import prepare_matrix, solve

    A, b, x_ref = tiny
    M = prepare_matrix(A, backend="numba-cuda")
    for precision, method in (("fp64", "cg"), ("mixed", "cg-reliable")):
        x, rep = solve(M, b, precision=precision, method=method, rtol=1e-10, check_every=4)
        assert rep.backend == "numba-cuda" and rep.converged, rep.reason
        assert _rel(x, x_ref) < 1e-9
    assert set(M.vals) == {np.dtype(np.float64), np.dtype(np.float32)}   # float32 values made once, kept


def _check(low, A):
    from hpcsolve.fem.linalg import lowops

    n = A.shape[0]
    ws = low.zeros(lowops.CHECK_SLOTS, np.float64)
    dinv = low.zeros(n, np.float64)
    dev = [low.to_device(a) for a in (A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data)]
    low.check_matrix(n, *dev, dinv, ws, 0)
    return low.to_host(ws), low.to_host(dinv)


@pytest.mark.parametrize("case", ["spd", "asymmetric", "missing_partner", "bad_diagonal", "nan"])
def test_numba_check_kernel_finds_what_numpy_finds(tiny, case):
    import scipy.sparse as sp

    from hpcsolve.fem.linalg import kernels_numba, kernels_numpy_low

    A = tiny[0].tolil()
    if case == "asymmetric":
        A[3, 4] = -1.25
    elif case == "missing_partner":
        A[0, 20] = 1e-3                          # a_0,20 stored, a_20,0 not
    elif case == "bad_diagonal":
        A[7, 7] = -2.0
        A[9, 9] = 0.0
    elif case == "nan":
        A[5, 6] = np.nan
    A = sp.csr_matrix(A)
    A.sort_indices()
    ref, dinv_ref = _check(kernels_numpy_low.low_ops(), A)
    got, dinv = _check(kernels_numba.low_ops(), A)
    print(f"\n{case}: numpy {ref.tolist()} numba {got.tolist()}")
    if case == "nan":                            # then only the count of non-finite values is decided on
        assert got[0] == ref[0]
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-15, atol=0)
        np.testing.assert_array_equal(dinv, dinv_ref)
    expected = {"spd": (0, 0), "asymmetric": (0.25, 0), "missing_partner": (1e-3, 0), "bad_diagonal": (0, 2),
                "nan": (None, 0)}[case]
    if expected[0] is not None:
        assert got[2] == pytest.approx(expected[0]) and got[3] == expected[1]
    else:
        assert got[0] == 1


def test_solve_api_takes_the_fused_path_on_numba_cuda(tiny):
    from hpcsolve.fem import solve

    A, b, x_ref = tiny
    x, rep = solve(A, b, precision="fp64", backend="numba-cuda", rtol=1e-10, check_every=4)
    assert any("fused device CG on numba-cuda" in n for n in rep.notes), rep.notes
    assert rep.converged and _rel(x, x_ref) < 1e-9
