"""The coarsest level of a multigrid hierarchy (hpcsolve.fem.linalg.precond.coarse.coarse_inverse) and aggregation
that cannot coarsen a level: strength thresholds across their documented range 0-1 (issue 36 item 1 / issue 37 item
8: any strength >= 0.25 on the shipped Poisson case raised numpy.linalg.LinAlgError 'Singular matrix'), a diagonal
SPD matrix and a singular but consistent 1-D Neumann system through ``hpcsolve.fem.solve``. NumPy backend."""

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from hpcsolve import cli
from hpcsolve.core.errors import CaseError
from hpcsolve.fem import solve
from hpcsolve.fem.linalg.precond.coarse import DENSE_COARSE_MAX, coarse_inverse
from hpcsolve.run import run_case

POISSON = Path(__file__).parents[2] / "cases" / "poisson_manufactured.toml"


def _neumann_1d(n: int) -> sp.csr_matrix:
    """-u'' with zero-flux ends on n nodes: symmetric, positive diagonal, singular (the constants)."""
    A = sp.diags([-np.ones(n - 1), 2.0 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1]).tolil()
    A[0, 0] = A[n - 1, n - 1] = 1.0
    return sp.csr_matrix(A)


def _consistent_rhs(n: int) -> np.ndarray:
    """A right-hand side in the range of the Neumann matrix (zero mean), not smooth."""
    b = np.sin(np.arange(n) * 12.9898 + 78.233)
    return b - b.mean()


# ------------------------------------------------------------------------------------------------ coarse_inverse

def test_coarse_inverse_of_a_definite_level_is_its_inverse():
    rng = np.random.default_rng(5)
    Q = rng.standard_normal((60, 60))
    M = Q @ Q.T + 60 * np.eye(60)
    X, rank = coarse_inverse(M)
    assert rank == 60
    assert np.max(np.abs(X @ M - np.eye(60))) < 1e-12


def test_coarse_inverse_of_a_singular_level_solves_its_consistent_problems():
    M = _neumann_1d(80).toarray()
    b = _consistent_rhs(80)
    X, rank = coarse_inverse(M)
    assert rank == 79                                   # the constants are its null space
    assert np.linalg.norm(M @ (X @ b) - b) / np.linalg.norm(b) < 1e-11
    assert np.array_equal(X, X.T)
    assert np.linalg.eigvalsh(X).min() > -1e-12         # semidefinite: a usable preconditioner block
    assert np.max(np.abs(X)) < 1e4                      # not the huge entries of inverting round-off


def test_coarse_inverse_of_a_zero_or_empty_level_is_no_correction():
    X, rank = coarse_inverse(np.zeros((3, 3)))
    assert rank == 0 and not X.any()
    X, rank = coarse_inverse(np.zeros((0, 0)))
    assert rank == 0 and X.shape == (0, 0)


# ------------------------------------------------------------------------------------------------ strength 0 to 1

def _poisson(overrides: list[str]):
    return run_case(POISSON, "numpy", overrides=["solve.preconditioner='amg'", *overrides], progress=False,
                    plots=False)


@pytest.mark.parametrize("strength,size", [
    (0.25, []),                   # the input: the shipped case as it is (64 x 64 cells)
    # no connection of the P1 Laplacian reaches 0.9 or 1.0 (all are 1/4 of the diagonal): the finest level is
    # the coarsest, a dense solve, here on 32 x 32 cells (961 unknowns) to keep it cheap
    (0.9, ["mesh.nx=32"]), (1.0, ["mesh.nx=32"])])
def test_amg_strength_thresholds_converge_to_the_strength_0_solution(strength, size):
    ref = _poisson(size)
    res = _poisson([*size, f"solve.multigrid.strength={strength}"])
    rtol = 1e-10                                        # the case's solve.rtol
    assert ref.status == res.status == "converged"
    assert res.metrics["true_residual"] <= rtol
    u0, u = ref.fields["u"], res.fields["u"]
    # both meet rtol: their difference is within kappa(A) rtol (kappa ~ 1.6e3 on 64 x 64 cells)
    assert np.linalg.norm(u - u0) / np.linalg.norm(u0) < 1e-6
    # the error against the exact solution is the discretization's, the same number for either strength
    assert res.metrics["error_l2"] == pytest.approx(ref.metrics["error_l2"], rel=1e-6)
    assert res.metrics["error_l2"] < 4e-3
    info = res.metrics["preconditioner_info"]
    assert "could not coarsen" in info["coarsening"] and f"threshold {strength:g}" in info["coarsening"]
    assert info["coarse_rank"] == info["rows"][-1]     # the level left uncoarsened is definite


def test_rs_coarsening_with_strength_1_converges_too():
    res = _poisson(["mesh.nx=32", "solve.multigrid.amg='rs'", "solve.multigrid.strength=1.0",
                    "solve.multigrid.coarse_size=4"])
    assert res.status == "converged" and res.metrics["true_residual"] <= 1e-10
    assert res.metrics["error_l2"] < 1.5e-3


# ------------------------------------------------------------------------------------------------ the Python API

def test_a_diagonal_spd_matrix_through_amg_is_solved_by_its_coarsest_level():
    n = 500                                             # above coarse_size 400: aggregation is tried, finds nothing
    d = np.linspace(1.0, 50.0, n)
    b = np.cos(np.arange(n))
    x, rep = solve(sp.diags(d).tocsr(), b, preconditioner="amg", multigrid={"hierarchy": "fp64"}, rtol=1e-10)
    assert rep.converged
    assert rep.history_recursive[1] < 1e-14             # the V-cycle is the exact inverse: one iteration solves it
    assert np.max(np.abs(x - b / d) / np.abs(b / d)) < 1e-9
    info = rep.preconditioner
    assert info["rows"] == [n] and info["coarse_rank"] == n
    assert "multigrid.strength" in info["coarsening"]


def test_a_diagonal_matrix_too_large_for_a_dense_coarse_solve_is_a_case_error_naming_the_strength():
    n = DENSE_COARSE_MAX + 1
    with pytest.raises(CaseError) as err:
        solve(sp.identity(n, format="csr") * 2.0, np.ones(n), preconditioner="amg", multigrid={"strength": 0.9})
    assert err.value.field == "multigrid.strength" and err.value.value == 0.9
    assert "got 0.9; allowed: a lower strength threshold" in str(err.value)
    assert f"{n:,} unknowns" in str(err.value)


def test_the_command_line_names_the_case_field_when_the_strength_leaves_too_large_a_level(tmp_path, capsys):
    # 72 x 72 cells: 5,041 unknowns, none coupled as strongly as 0.9, one more than a dense coarse solve takes
    code = cli.main(["run", str(POISSON), "--backend", "numpy", "--quiet", "--no-plots", "--out", str(tmp_path / "r"),
                     "--set", "mesh.nx=72", "--set", "solve.preconditioner='amg'",
                     "--set", "solve.multigrid.strength=0.9"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("hpcsolve: error: solve.multigrid.strength: smoothed aggregation could not coarsen "
                             "level 0 (5,041 unknowns) with strength threshold 0.9")
    assert "got 0.9; allowed: a lower strength threshold" in err[0]


@pytest.mark.parametrize("n,options", [(200, {}),                 # the whole matrix is the coarsest level
                                       (3000, {"coarse_size": 8}),     # aggregation levels above a singular one
                                       (3000, {"coarse_size": 8, "amg": "rs"})])
def test_a_singular_consistent_neumann_system_converges_with_amg(n, options):
    A, b = _neumann_1d(n), _consistent_rhs(n)
    x, rep = solve(A, b, preconditioner="amg", multigrid={"hierarchy": "fp64", **options}, rtol=1e-9)
    assert rep.converged
    assert np.linalg.norm(b - A @ x) / np.linalg.norm(b) <= 1e-9
    info = rep.preconditioner
    assert info["coarse_rank"] == info["rows"][-1] - 1  # the constants reach the coarsest level, found singular
