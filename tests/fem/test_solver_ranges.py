"""Reliability III (issue 37), the FEM solver items: 9 (a float32 / 16-bit multigrid hierarchy on a coefficient
contrast beyond float32: NaN before, now unit-diagonal levels or a float64 hierarchy with a note), 18a (mixed precision
with a tiny or huge right-hand side: "breakdown ... not SPD" or a stall before, now the float32 residual is scaled
to about unit norm) and 14 (the near-null space of the Python API: raw ValueError or a silent acceptance before,
now a CaseError naming ``near_nullspace``). NumPy backend, small problems."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from hpcsolve.core.errors import CaseError
from hpcsolve.fem import prepare_matrix, solve
from hpcsolve.fem.discrete import testproblems as tp
from hpcsolve.fem.linalg.cg_run import SCALE_FREE_RANGE, residual_scale
from hpcsolve.fem.linalg.precond.coarse import coarse_inverse
from hpcsolve.fem.linalg.precond.hierarchy import SCALED_RANGE_LIMIT
from hpcsolve.fem.linalg.precond.multigrid import Multigrid

F64 = np.float64


# ------------------------------------------------------------------------- item 9: contrasts beyond float32
@pytest.mark.filterwarnings("error::RuntimeWarning")      # no raw "overflow encountered" lines either
@pytest.mark.parametrize("kind", ["mg", "amg"])
@pytest.mark.parametrize("hierarchy", ["fp32", "fp16"])
def test_low_precision_hierarchy_converges_on_a_1e40_conductivity_contrast(kind, hierarchy):
    """A 1e40 checkerboard: the float32 V-cycle broke down with NaN at iteration 1 (fp64 converged in ~21)."""
    P = tp.jumps(16, 1e40)
    x, rep = solve(P.A, P.b, preconditioner=Multigrid(kind, {"hierarchy": hierarchy}, grid=P.grid), rtol=1e-10)
    assert rep.converged, rep.reason
    assert rep.true_residual <= 1e-10 and rep.iterations <= 30
    assert rep.preconditioner["scaling"].startswith("multigrid levels scaled to a unit diagonal")
    assert rep.preconditioner["scaling"] in rep.notes
    assert np.linalg.norm(P.A @ x - P.b) / np.linalg.norm(P.b) <= 1e-10


def test_unit_diagonal_float32_vcycle_is_nearly_the_float64_vcycle():
    """The scaled float32 hierarchy is the unscaled float64 one in exact arithmetic but for the smoothers'
    lambda_max (15 power iterations from one start vector in other coordinates: 1.917 against 1.884), so the two
    V-cycles agree to 0.2 % (float32 rounding alone would be 1e-7; before, the float32 one gave NaN)."""
    P = tp.jumps(32, 1e40)              # 961 unknowns: levels above the direct coarsest one
    A = prepare_matrix(P.A)
    out = {}
    for h in ("fp32", "fp64"):
        pc = Multigrid("mg", {"hierarchy": h}, grid=P.grid)
        pc.setup(A)
        r = np.sin(np.arange(A.n) * 1.3)
        z = np.zeros(A.n)
        pc.apply(r, z)
        out[h] = z
    assert np.all(np.isfinite(out["fp32"]))
    assert np.linalg.norm(out["fp32"] - out["fp64"]) / np.linalg.norm(out["fp64"]) < 5e-3


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_contrast_beyond_a_scaled_float32_hierarchy_builds_it_in_float64_with_a_note():
    P = tp.jumps(16, 1e70)
    assert 1e70 > SCALED_RANGE_LIMIT
    x, rep = solve(P.A, P.b, preconditioner=Multigrid("amg", {"hierarchy": "fp32"}), rtol=1e-10)
    assert rep.converged, rep.reason
    note = rep.preconditioner["scaling"]
    assert note.startswith("multigrid hierarchy fp32 built in fp64 instead") and "1e+70" in note
    assert note in rep.notes


def test_the_coarse_inverse_keeps_the_weak_rows_of_a_1e40_contrast():
    """Pivots were judged against the largest diagonal entry: the 1e-40 row counted as round-off of zero and got no
    correction (X[1, 1] = 0; the fp64 hierarchy's direct solve then returned 0 on the weak region)."""
    M = np.array([[1e40, -1e39, 0.0], [-1e39, 1e40, 0.0], [0.0, 0.0, 1.0]])
    X, rank = coarse_inverse(M)
    assert rank == 3
    assert np.allclose(X @ M, np.eye(3), atol=1e-12)
    P = tp.jumps(16, 1e40)              # 225 unknowns: the whole matrix is the coarsest level
    x, rep = solve(P.A, P.b, preconditioner=Multigrid("amg", {"hierarchy": "fp64"}), rtol=1e-10)
    assert rep.converged and rep.iterations <= 4      # one block of the short first blocks


def test_an_ordinary_contrast_keeps_the_unscaled_hierarchy():
    P = tp.jumps(16, 1e6)
    x, rep = solve(P.A, P.b, preconditioner=Multigrid("mg", grid=P.grid), rtol=1e-10)
    assert rep.converged and rep.preconditioner["scaling"] == ""


# ------------------------------------------------------------------------- item 18a: tiny or huge right-hand sides
@pytest.mark.parametrize("method", ["cg-reliable", "ir-restarted"])
@pytest.mark.parametrize("preconditioner", [None, "jacobi", "amg"])
@pytest.mark.parametrize("scale", [1e-30, 1e-20, 1e30])
def test_mixed_precision_with_a_tiny_or_huge_right_hand_side_converges(method, preconditioner, scale):
    """b x 1e-30 ended in "breakdown: p.Ap = 0 <= 0 ... not symmetric positive definite", amg stopped at 3.5e-4
    with b x 1e-20, b x 1e30 overflowed float32 squares (NaN); the float64 solve converges in each case."""
    P = tp.poisson_fd(15)
    b = P.b * scale
    x, rep = solve(P.A, b, precision="mixed", method=method, preconditioner=preconditioner, rtol=1e-10)
    assert rep.converged, rep.reason
    assert rep.fallback == "", rep.fallback              # no float64 fallback needed
    assert np.linalg.norm(b - P.A @ x) / np.linalg.norm(b) <= 1e-10
    exact = spla.spsolve(P.A.tocsc(), b)
    assert np.linalg.norm(x - exact) / np.linalg.norm(exact) < 1e-8


def test_the_residual_scale_is_a_power_of_two_near_one_over_the_norm():
    assert residual_scale(1.0) == 1.0 and residual_scale(SCALE_FREE_RANGE) == 1.0
    assert residual_scale(1e-30) == 2.0 ** 100                  # log2(1e-30) = -99.66
    assert residual_scale(3e20) == 2.0 ** -68
    assert residual_scale(0.0) == 1.0 and residual_scale(float("nan")) == 1.0


# ------------------------------------------------------------------------- item 14: the near-null space argument
@pytest.mark.parametrize("make,got", [(lambda n: np.zeros((n, 1)), "column 0 all zeros"),
                                      (lambda n: np.zeros((n, 0)), "shape (225, 0)"),
                                      (lambda n: np.c_[np.ones(n), np.zeros(n)], "column 1 all zeros"),
                                      (lambda n: np.full((n, 1), "a"), "<U1 entries"),
                                      (lambda n: np.ones(n), "shape (225,)")])
def test_a_zero_empty_or_malformed_near_nullspace_is_a_case_error_naming_it(make, got):
    P = tp.poisson_fd(15)
    n = P.A.shape[0]
    with pytest.raises(CaseError) as exc:
        solve(P.A, P.b, preconditioner=Multigrid("amg", {"coarse_size": 50}, near_nullspace=make(n)))
    assert exc.value.field == "near_nullspace"
    assert f"got {got!r}" in str(exc.value) and f"a finite real ({n}, k) array" in str(exc.value)


def test_a_good_near_nullspace_still_runs():
    P = tp.poisson_fd(15)
    n = P.A.shape[0]
    x, rep = solve(P.A, P.b, preconditioner=Multigrid("amg", {"coarse_size": 50}, near_nullspace=np.ones((n, 1))),
                   rtol=1e-10)
    assert rep.converged and rep.true_residual <= 1e-10


def test_pcg_jacobi_with_a_preconditioner_object_names_it():
    """method 'pcg-jacobi' with a Multigrid object: the error names the preconditioner ('amg'), not its repr
    (``<...Multigrid object at 0x...>``, issue 37 item 11)."""
    A = sp.diags([2.0] * 10).tocsr()
    with pytest.raises(CaseError) as exc:
        solve(A, np.ones(10), method="pcg-jacobi", preconditioner=Multigrid("amg"))
    assert exc.value.field == "preconditioner" and "'amg'" in str(exc.value) and "object at" not in str(exc.value)
