"""The one CG (hpcsolve.fem.linalg.cg) on the NumPy low ops: the same algorithm and decisions as on the GPU.

Checks the NumPy low ops against SciPy, against the Numba-CUDA simulator (same iteration counts),
the mixed-precision iteration ratio on 2D Poisson m = 256 (65,536 unknowns, kappa 2.7e4, random b,
true relative residual 1e-10; docs/design/fem_gpu.md has the ratios at m = 512 .. 2048), the replacement
variants, and that a general (non-fused) preconditioner plugs into the same CG. CG itself is studied: the solves
name preconditioner "none" (``solve``'s default is "auto")."""

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from fem_problems import poisson2d
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg import precond
from hpcsolve.fem import prepare_matrix, solve

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
def test_numpy_backend_matches_scipy(small, precision, method):
    A, b, x_ref = small
    x, rep = solve(A, b, preconditioner="none", precision=precision, method=method, rtol=RTOL, check_every=8)
    print(f"\n{precision}/{method}: its {rep.iterations} true {rep.true_residual:.2e} err {_rel(x, x_ref):.2e}")
    assert rep.converged, rep.reason
    assert rep.true_residual <= RTOL
    assert _rel(x, x_ref) < 178 * RTOL * 2
    assert rep.backend == "numpy"


def test_numpy_backend_fp32_really_computes_in_float32(small):
    A, b, x_ref = small
    x, rep = solve(A, b, preconditioner="none", precision="fp32", rtol=1e-12, check_every=8)
    print(f"\nfp32: true residual floor {rep.true_residual:.2e}")
    assert not rep.converged
    assert 1e-9 < rep.true_residual < 1e-4      # float32 floor, about kappa * u32 = 1e-5 at most


@pytest.mark.cudasim
@pytest.mark.parametrize("precision,method", METHODS + [("mixed", "cg-reliable-delta"), ("fp32", "cg"),
                                                        ("mixed", "cg-reliable-jacobi")])
def test_numpy_low_ops_take_the_simulator_decisions(tiny, precision, method):
    """Same iteration and replacement counts as the Numba-CUDA kernels under the simulator."""
    A, b, _ = tiny
    kw = dict(rtol=RTOL if precision != "fp32" else 1e-12, check_every=4, maxiter=200, preconditioner="none")
    if method == "cg-reliable-delta":
        method, kw["reliable_criterion"] = "cg-reliable", "delta"
    if method == "cg-reliable-jacobi":
        method, kw["preconditioner"] = "cg-reliable", "jacobi"
    _, cpu = solve(A, b, precision=precision, method=method, backend="numpy", **kw)
    _, sim = solve(A, b, precision=precision, method=method, backend="numba-cuda", **kw)
    print(f"\n{precision}/{method}: cpu its {cpu.iterations} ({cpu.outer_iterations} outer), "
          f"simulator {sim.iterations} ({sim.outer_iterations})")
    assert (cpu.backend, sim.backend) == ("numpy", "numba-cuda")
    assert cpu.converged == sim.converged == (precision != "fp32")
    assert cpu.iterations == sim.iterations
    assert cpu.outer_iterations == sim.outer_iterations
    assert cpu.history_true_iterations.tolist() == sim.history_true_iterations.tolist()


@pytest.fixture(scope="module")
def poisson256():
    from hpcsolve.report.bench_fem import _host_poisson

    A = _host_poisson(256)
    b = np.random.default_rng(1).standard_normal(A.shape[0])     # as bench_fem's solve
    dA = prepare_matrix(A)
    _, ref = solve(dA, b, preconditioner="none", precision="fp64", rtol=RTOL)
    return A, dA, b, ref


def test_reliable_ratio_m256(poisson256):
    """Default cg-reliable (vdV-Ye criterion) vs the QUDA delta criterion (block ends every 64)."""
    _, dA, b, ref = poisson256
    _, new = solve(dA, b, preconditioner="none", precision="mixed", rtol=RTOL)
    _, old = solve(dA, b, preconditioner="none", precision="mixed", rtol=RTOL, reliable_criterion="delta")
    r_new, r_old = new.iterations / ref.iterations, old.iterations / ref.iterations
    print(f"\nfp64 {ref.iterations}; vdvye {new.iterations} ({r_new:.3f}x, {new.outer_iterations} replacements); "
          f"delta {old.iterations} ({r_old:.3f}x, {old.outer_iterations})")
    assert ref.converged and new.converged and old.converged
    assert new.fallback == ""
    assert r_new <= 1.10          # measured 1.071 (960 / 896)
    assert r_new < r_old          # delta criterion measured 1.205 (1080 / 896)


def test_reliable_ratio_checks_every_10_m256(poisson256):
    """The same choice with decisions every 10 iterations (the former CPU default): vdV-Ye still wins."""
    _, dA, b, _ = poisson256
    _, ref = solve(dA, b, preconditioner="none", precision="fp64", rtol=RTOL, check_every=10)
    _, new = solve(dA, b, preconditioner="none", precision="mixed", method="cg-reliable", rtol=RTOL, check_every=10)
    _, old = solve(dA, b, preconditioner="none", precision="mixed", method="cg-reliable", rtol=RTOL, check_every=10,
                   reliable_criterion="delta")
    r_new, r_old = new.iterations / ref.iterations, old.iterations / ref.iterations
    print(f"\ncheck_every=10: fp64 {ref.iterations}; vdvye {new.iterations} ({r_new:.3f}x, "
          f"{new.outer_iterations} replacements); delta {old.iterations} ({r_old:.3f}x)")
    assert ref.converged and new.converged and new.fallback == ""
    assert r_new <= 1.10
    assert r_new <= r_old


@pytest.mark.parametrize("p", ["keep", "rebeta"])
def test_replacement_variants_converge(poisson256, p):
    _, dA, b, ref = poisson256
    _, rep = solve(dA, b, preconditioner="none", precision="mixed", rtol=RTOL, reliable_p=p, accumulate="block")
    print(f"\nreliable_p={p}, accumulate=block: {rep.iterations} ({rep.iterations / ref.iterations:.3f}x)")
    assert rep.converged and rep.iterations / ref.iterations <= 1.25


@pytest.mark.parametrize("mode", ["replace", "block", "fp64"])
def test_every_accumulation_mode_converges_to_the_same_solution(poisson256, mode):
    """accumulate names an Accumulation (hpcsolve.fem.linalg.cg_options.ACCUMULATIONS): y folded into x64 at
    replacements, at every block, or x updated in float64 (NumPy low ops only): each reaches rtol with the solution
    of the float64 CG."""
    A, dA, b, ref = poisson256
    x, rep = solve(dA, b, preconditioner="none", precision="mixed", method="cg-reliable", rtol=RTOL, accumulate=mode)
    x64, _ = solve(dA, b, preconditioner="none", precision="fp64", rtol=RTOL)
    assert rep.converged and rep.iterations / ref.iterations <= 1.25
    assert _rel(x, x64) < 1e-7


def test_bad_reliable_options_are_case_errors(small):
    A, b, _ = small
    with pytest.raises(CaseError, match="reliable_criterion"):
        solve(A, b, precision="mixed", reliable_criterion="sometimes")
    with pytest.raises(CaseError, match="reliable_p"):
        solve(A, b, precision="mixed", reliable_p="reorth")       # the seam's option, retired with it
    with pytest.raises(CaseError, match="^device_path: unknown solver option"):      # the retired seam option is gone
        solve(A, b, device_path="seam")


class GeneralJacobi(precond.Preconditioner):
    """Jacobi applied as a general preconditioner (z = D^-1 r launched between the CG kernels), the way a
    multigrid V-cycle would plug in: it must take the decisions of the fused Jacobi."""

    name = "jacobi-general"
    identity = False

    def setup(self, A):
        self.low, self.A, self.scratch = A.low, A, A.low.zeros(1, np.float64)

    def apply(self, r, z, rz=None):
        ws, i_rz = rz.target if rz is not None else (self.scratch, -1)
        self.low.precondition(self.A.dinv(r.dtype), r, z, ws, i_rz)


@pytest.mark.parametrize("precision,method,options", [
    ("fp64", "cg", {}), ("fp32", "cg", {}), ("mixed", "cg-reliable", {}),
    ("mixed", "cg-reliable", {"reliable_p": "rebeta"}), ("mixed", "cg-reliable", {"reliable_criterion": "delta"}),
    ("mixed", "ir-restarted", {})])
def test_a_general_preconditioner_plugs_into_the_same_cg(precision, method, options):
    A0 = poisson2d(24)
    scale = np.logspace(0, 2, A0.shape[0])
    A = (sp.diags(scale) @ A0 @ sp.diags(scale)).tocsr()      # badly scaled: Jacobi matters
    b = np.random.default_rng(5).standard_normal(A.shape[0])
    rtol = 1e-12 if precision == "fp32" else 1e-9
    kw = dict(precision=precision, method=method, rtol=rtol, check_every=8, **options)
    _, fused = solve(A, b, preconditioner="jacobi", **kw)
    _, general = solve(A, b, preconditioner=GeneralJacobi(), **kw)
    _, plain = solve(A, b, preconditioner="none", **kw)
    print(f"\n{precision}/{method} {options}: fused Jacobi {fused.iterations} ({fused.outer_iterations}), general "
          f"{general.iterations} ({general.outer_iterations}), none {plain.iterations}; {general.reason[:60]}")
    assert general.method.endswith("jacobi-general")
    assert general.converged == fused.converged
    assert abs(general.iterations - fused.iterations) <= 8        # one block of 8: the sums of r.z round differently
    assert general.iterations < 0.5 * plain.iterations
    if fused.converged:
        assert general.true_residual <= rtol
    else:                                                        # fp32: both stall at a float32 floor
        assert general.true_residual < 1e3 * fused.true_residual
