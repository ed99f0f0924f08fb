"""Reliability IV (issue 49), item 1: tiny and huge right-hand sides.

``||b||`` was the square root of a sum of squares: 1e-170 * ones had norm 0, so ``solve`` returned x = 0 as "b = 0:
x = 0 is exact", converged; 1e-160 * ones reported converged with a true residual of 0.0 (actual 4.7e-3); mixed
precision raised a raw OverflowError; 1e300 * ones was refused as "too large"; fp32 could not solve b = 1e-40 or
1e30 (float32 under/overflow); the CLI with problem.source = 1e-300 exited 0 with u_max 0. Now the solve scales b
(and, for float32 work, a host matrix far outside float32's range) by a power of two, exactly, and every norm is
scaled (``hpcsolve.core.scaled``). docs/design/reliability.md, "Tiny and huge right-hand sides".
"""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
import scipy.sparse as sp

from hpcsolve import cli
from hpcsolve.core.errors import CaseError
from hpcsolve.fem import prepare_matrix, solve

N = 40
A0 = sp.diags([-np.ones(N - 1), 2.5 * np.ones(N), -np.ones(N - 1)], [-1, 0, 1], format="csr")
X1 = np.linalg.solve(A0.toarray(), np.ones(N))           # the solution for b = ones
RTOL = {"fp64": 1e-8, "fp32": 1e-5, "mixed": 1e-8}       # fp32 CG reaches about kappa * 6e-8 here


def true_residual(A, x, b) -> float:
    """||b - A x|| / ||b|| with everything scaled by the power of two of max |b| first (exact): no underflow (written
    here with NumPy alone, not with the code under test)."""
    e = int(np.frexp(np.max(np.abs(b)))[1])
    bs, xs = np.ldexp(b, -e), np.ldexp(x, -e)
    r = bs - A @ xs
    m = np.max(np.abs(r))
    return float(m * np.linalg.norm(r / m) / np.linalg.norm(bs)) if m > 0 else 0.0


@pytest.mark.parametrize("s", [1e-300, 1e-170, 1e-160, 1e-40, 1e30, 1e300])
@pytest.mark.parametrize("precision", ["fp64", "fp32", "mixed"])
@pytest.mark.parametrize("pc", ["none", "jacobi", "amg"])
def test_a_scaled_right_hand_side_gives_the_scaled_solution(s, precision, pc):
    b = s * np.ones(N)
    x, rep = solve(A0, b, precision=precision, preconditioner=pc, rtol=RTOL[precision])
    assert rep.converged, (rep.reason, rep.true_residual)
    assert rep.true_residual <= RTOL[precision]
    assert true_residual(A0, x, b) <= RTOL[precision]
    assert np.max(np.abs(x / s - X1)) <= 50 * RTOL[precision] * np.max(np.abs(X1))


@pytest.mark.parametrize("s", [1e-300, 1e-170, 1e300])
def test_the_direct_solve_scales_too(s):
    x, rep = solve(A0, s * np.ones(N), method="spsolve")
    assert rep.converged and rep.true_residual <= 1e-12
    assert np.max(np.abs(x / s - X1)) <= 1e-12 * np.max(np.abs(X1))


def test_an_initial_guess_is_scaled_with_b():
    s = 1e-200
    x, rep = solve(A0, s * np.ones(N), x0=s * X1 * (1 + 1e-3), rtol=1e-10)
    assert rep.converged and true_residual(A0, x, s * np.ones(N)) <= 1e-10


@pytest.mark.parametrize("precision", ["fp64", "fp32", "mixed"])
def test_a_solution_below_the_float64_range_is_not_called_converged(precision):
    """x ~ 1e-340 (A x 1e40, b x 1e-300): its entries are subnormal (few digits) or zero; the residual of the x
    returned decides, and it is far above rtol."""
    x, rep = solve((A0 * 1e40).tocsr(), 1e-300 * np.ones(N), precision=precision, rtol=RTOL[precision])
    assert not rep.converged and "below the normal float64 range" in rep.reason, rep.reason
    assert rep.true_residual > RTOL[precision]


@pytest.mark.parametrize("precision", ["fp64", "mixed"])
def test_a_solution_above_the_float64_range_says_it_overflows(precision):
    x, rep = solve((A0 * 1e-300).tocsr(), 1e300 * np.ones(N), precision=precision)
    assert not rep.converged and "overflows float64" in rep.reason, rep.reason


@pytest.mark.parametrize("a", [1e-40, 1e40, 1e-200, 1e200])
@pytest.mark.parametrize("precision", ["fp32", "mixed"])
def test_float32_work_on_a_matrix_beyond_float32_scales_it(a, precision):
    """A host matrix far outside float32's range is scaled by a power of two for float32 work (its entries cast to
    0 or inf before); a prepared one (used as it is) is refused with a typed error naming A."""
    A = (A0 * a).tocsr()
    x, rep = solve(A, np.ones(N), precision=precision, preconditioner="jacobi", rtol=RTOL[precision])
    assert rep.converged, rep.reason
    assert np.max(np.abs(x * a - X1)) <= 50 * RTOL[precision] * np.max(np.abs(X1))
    with pytest.raises(CaseError, match=r"^A: .*prepare it scaled by a power of two"):
        solve(prepare_matrix(A), np.ones(N), precision=precision)


def test_scaled_norms():
    from hpcsolve.core import scaled

    for s in (5e-324, 1e-300, 1e-170, 1.0, 1e170, 1e300):
        v = np.full(50, s)
        assert scaled.norm2(v) == pytest.approx(s * np.sqrt(50), rel=1e-15 if s >= 1e-300 else 0.2, abs=0.0)
    assert scaled.norm2(np.zeros(3)) == 0.0 and scaled.norm2(np.zeros(0)) == 0.0
    assert np.isnan(scaled.norm2(np.array([1.0, np.nan]))) and scaled.norm2(np.full(4, 1.7e308)) == np.inf
    assert scaled.relative_norm(1e-300 * np.ones(4), 1e-300 * np.ones(4)) == 1.0
    assert scaled.ratio(1e300, 1e-300) == np.inf and scaled.ratio(0.0, 0.0) == 0.0


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("s", [1e-300, 1e-160, 1e150])
def test_lbm_observables_and_field_error_at_extreme_scales(s):
    from hpcsolve.lbm import observables as obs
    from hpcsolve.report.comparison import field_error

    rng = np.random.default_rng(3)
    u, v = rng.uniform(-1, 1, (8, 8)), rng.uniform(-1, 1, (8, 8))
    rho, fluid = np.ones((8, 8)), np.ones((8, 8), bool)
    assert obs.relative_change(s * u, s * v) == pytest.approx(obs.relative_change(u, v), rel=1e-12)
    assert obs.relative_l2(s * u, s * v) == pytest.approx(obs.relative_l2(u, v), rel=1e-12)
    got, want = field_error(s * u, s * v), field_error(u, v)
    assert got["rel_l2"] == pytest.approx(want["rel_l2"], rel=1e-12)
    assert got["rel_max"] == pytest.approx(want["rel_max"], rel=1e-12)
    energy = obs.kinetic_energy(rho, s * u, s * v, fluid)
    if s >= 1e-150:                 # s^2 within float64's normal range: the energy is s^2 times the unit one
        assert energy == pytest.approx(s * s * obs.kinetic_energy(rho, u, v, fluid), rel=1e-12, abs=0.0)
    else:                           # below it: 0 or a subnormal, never more than the true value
        assert 0.0 <= energy <= 1e-300


CASE = """solver = "fem"
name = "scaled_source"
[mesh]
kind = "rectangle"
nx = 8
x = [0.0, 1.0]
y = [0.0, 1.0]
[problem]
kind = "poisson"
conductivity = 1.0
source = 1.0
[[boundary.dirichlet]]
where = { all = true }
value = 0.0
[solve]
rtol = 1e-10
"""


def _run(tmp_path, source: float, precision: str) -> tuple[int, dict]:
    case = tmp_path / "case.toml"
    case.write_text(CASE)
    out = tmp_path / f"out-{source:g}-{precision}"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = cli.main(["run", str(case), "--backend", "numpy", "--precision", precision, "--set",
                         f"problem.source={source!r}", "--out", str(out), "--no-plots", "--quiet"])
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    return code, summary.get("metrics", summary)


@pytest.mark.parametrize("source", [1e-300, 1e300])
@pytest.mark.parametrize("precision", ["fp64", "mixed"])
def test_the_cli_with_a_tiny_or_huge_source_gives_the_scaled_solution(tmp_path, source, precision):
    code1, unit = _run(tmp_path, 1.0, precision)
    code, m = _run(tmp_path, source, precision)
    assert code1 == 0 and code == 0, m
    assert m["converged"] and m["true_residual"] <= 1e-10
    assert m["u_max"] == pytest.approx(source * unit["u_max"], rel=1e-9, abs=0.0)
    assert m["error_vs_fp64_reference"] == pytest.approx(unit["error_vs_fp64_reference"], abs=1e-12)


@pytest.mark.cudasim
@pytest.mark.parametrize("s", [1e-300, 1e-40, 1e300])
@pytest.mark.parametrize("precision", ["fp64", "fp32", "mixed"])
def test_numba_cuda_ops_share_the_scaling(s, precision):
    """The scaling is done above the ops: the Numba-CUDA kernels (under the CUDA simulator) solve the scaled system
    as the NumPy ones do."""
    n = 12
    A = sp.diags([-np.ones(n - 1), 2.5 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1], format="csr")
    x1 = np.linalg.solve(A.toarray(), np.ones(n))
    x, rep = solve(A, s * np.ones(n), precision=precision, preconditioner="jacobi", backend="numba-cuda",
                   rtol=RTOL[precision], check_every=4, maxiter=200)
    assert rep.converged, rep.reason
    assert true_residual(A, x, s * np.ones(n)) <= RTOL[precision]
    assert np.max(np.abs(x / s - x1)) <= 50 * RTOL[precision] * np.max(np.abs(x1))
