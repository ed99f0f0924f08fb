"""device_cg's fused CG on the CPU (kernels_numpy_low): the same algorithm and decisions as on the GPU.

Checks the NumPy low ops against SciPy, against the Numba-CUDA simulator (same iteration counts),
and the mixed-precision iteration ratio on 2D Poisson m = 256 (65,536 unknowns, kappa 2.7e4,
random b, true relative residual 1e-10); docs/fem_gpu.md has the ratios at m = 512 .. 2048."""

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from fem_problems import poisson2d
from hpcsolve.errors import CaseError
from hpcsolve.fem import kernels_numpy_low, solve

RTOL = 1e-10
METHODS = [("fp64", "cg"), ("fp64", "pcg-jacobi"), ("mixed", "cg-reliable"), ("mixed", "ir-restarted")]


def _rel(x, y):
    return float(np.linalg.norm(x - y) / np.linalg.norm(y))


@pytest.fixture(scope="module")
def tiny():
    A = poisson2d(6)
    b = np.random.default_rng(7).standard_normal(A.shape[0])
    return A, b, spla.spsolve(A.tocsc(), b)


@pytest.fixture(scope="module")
def small():
    A = poisson2d(20)    # 400 unknowns, kappa 178
    b = np.random.default_rng(3).standard_normal(A.shape[0])
    return A, b, spla.spsolve(A.tocsc(), b)


@pytest.mark.parametrize("precision,method", METHODS)
def test_fused_cpu_matches_scipy(small, precision, method):
    A, b, x_ref = small
    x, rep = kernels_numpy_low.solve_fused(A, b, precision=precision, method=method, rtol=RTOL, check_every=8)
    print(f"\n{precision}/{method}: its {rep.iterations} true {rep.true_residual:.2e} err {_rel(x, x_ref):.2e}")
    assert rep.converged, rep.reason
    assert rep.true_residual <= RTOL
    assert _rel(x, x_ref) < 178 * RTOL * 2
    assert rep.backend == "numpy"


def test_fused_cpu_fp32_really_computes_in_float32(small):
    A, b, x_ref = small
    x, rep = kernels_numpy_low.solve_fused(A, b, precision="fp32", rtol=1e-12, check_every=8)
    print(f"\nfp32: true residual floor {rep.true_residual:.2e}")
    assert not rep.converged
    assert 1e-9 < rep.true_residual < 1e-4      # float32 floor, about kappa * u32 = 1e-5 at most


@pytest.mark.cudasim
@pytest.mark.parametrize("precision,method", METHODS + [("mixed", "cg-reliable-delta")])
def test_fused_cpu_takes_the_simulator_decisions(tiny, precision, method):
    """Same iteration and replacement counts as the Numba-CUDA kernels under the simulator."""
    from hpcsolve.fem import kernels_numba

    A, b, _ = tiny
    kw = dict(rtol=RTOL, check_every=4, maxiter=200)
    if method == "cg-reliable-delta":
        method, kw["reliable_criterion"] = "cg-reliable", "delta"
    _, cpu = kernels_numpy_low.solve_fused(A, b, precision=precision, method=method, **kw)
    _, sim = kernels_numba.solve_fused(A, b, precision=precision, method=method, **kw)
    print(f"\n{precision}/{method}: cpu its {cpu.iterations} ({cpu.outer_iterations} outer), "
          f"simulator {sim.iterations} ({sim.outer_iterations})")
    assert cpu.converged and sim.converged
    assert cpu.iterations == sim.iterations
    assert cpu.outer_iterations == sim.outer_iterations


@pytest.fixture(scope="module")
def poisson256():
    from hpcsolve.report.bench_fem import _host_poisson

    A = _host_poisson(256)
    b = np.random.default_rng(1).standard_normal(A.shape[0])     # as bench_fem's solve
    dA = kernels_numpy_low.upload(A)
    _, ref = kernels_numpy_low.solve_fused(dA, b, precision="fp64", rtol=RTOL)
    return A, dA, b, ref


def test_reliable_ratio_fused_m256(poisson256):
    """Default cg-reliable (vdV-Ye criterion) vs the QUDA delta criterion, fused path (block ends every 64)."""
    _, dA, b, ref = poisson256
    _, new = kernels_numpy_low.solve_fused(dA, b, precision="mixed", rtol=RTOL)
    _, old = kernels_numpy_low.solve_fused(dA, b, precision="mixed", rtol=RTOL, reliable_criterion="delta")
    r_new, r_old = new.iterations / ref.iterations, old.iterations / ref.iterations
    print(f"\nfp64 {ref.iterations}; vdvye {new.iterations} ({r_new:.3f}x, {new.outer_iterations} replacements); "
          f"delta {old.iterations} ({r_old:.3f}x, {old.outer_iterations})")
    assert ref.converged and new.converged and old.converged
    assert new.fallback == ""
    assert r_new <= 1.10          # measured 1.071 (960 / 896)
    assert r_new < r_old          # delta criterion measured 1.205 (1080 / 896)


def test_reliable_ratio_seam_m256(poisson256):
    """The same option on krylov.py's algorithm (replacement at checks every 10 iterations, p re-orthogonalized)."""
    A, _, b, _ = poisson256
    _, ref = solve(A, b, precision="fp64", rtol=RTOL)
    _, new = solve(A, b, precision="mixed", method="cg-reliable", rtol=RTOL)
    _, old = solve(A, b, precision="mixed", method="cg-reliable", rtol=RTOL, reliable_criterion="delta")
    r_new, r_old = new.iterations / ref.iterations, old.iterations / ref.iterations
    print(f"\nseam fp64 {ref.iterations}; vdvye {new.iterations} ({r_new:.3f}x, {new.outer_iterations} replacements); "
          f"delta {old.iterations} ({r_old:.3f}x)")
    assert new.converged and new.fallback == ""
    assert r_new <= 1.10          # measured 1.091 (960 / 880)
    assert r_new <= r_old         # delta: 1.102 (970 / 880)


@pytest.mark.parametrize("p", ["keep", "rebeta"])
def test_fused_replacement_variants_converge(poisson256, p):
    _, dA, b, ref = poisson256
    _, rep = kernels_numpy_low.solve_fused(dA, b, precision="mixed", rtol=RTOL, reliable_p=p, accumulate="block")
    print(f"\nreliable_p={p}, accumulate=block: {rep.iterations} ({rep.iterations / ref.iterations:.3f}x)")
    assert rep.converged and rep.iterations / ref.iterations <= 1.25


def test_bad_reliable_options_are_case_errors(small):
    A, b, _ = small
    with pytest.raises(CaseError, match="reliable_criterion"):
        solve(A, b, precision="mixed", reliable_criterion="sometimes")
    with pytest.raises(CaseError, match="reliable_p"):
        kernels_numpy_low.solve_fused(A, b, precision="mixed", reliable_p="reorth")
