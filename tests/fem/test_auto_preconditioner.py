"""``preconditioner="auto"``, ``solve``'s default on a user's matrix (hpcsolve/fem/linalg/precond/auto.py): Jacobi-PCG
probes the matrix at decision points and switches to AMG where the cost model says AMG's set-up and iterations cost
less than the Jacobi-PCG iterations predicted; the report says what it chose and why. The assertions are on numbers
the code produces (counts, residuals, the model's decisions), never on clocks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse.linalg import eigsh

from hpcsolve.core.errors import CaseError
from hpcsolve.core.precision import get_precision
from hpcsolve.fem import Multigrid, prepare_matrix, solve
from hpcsolve.fem.discrete import amg_family
from hpcsolve.fem.discrete import testproblems as tp
from hpcsolve.fem.linalg.precond import auto

FP64 = get_precision("fp64")


def _true_residual(A, b, x) -> float:
    return float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))


def _shifted_laplacian(m: int, shift: float) -> sp.csr_matrix:
    """The 5-point Laplacian on m x m nodes plus shift I: diagonally dominant, kappa(D^-1 A) ~ (8 + shift) / shift."""
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    I = sp.identity(m)
    return (sp.kron(I, T) + sp.kron(T, I) + shift * sp.identity(m * m)).tocsr()


def _kappa_jacobi(A) -> float:
    """kappa(D^-1 A) from the symmetric D^-1/2 A D^-1/2 (ARPACK: the largest, and the smallest by shift-invert)."""
    d = sp.diags(1.0 / np.sqrt(A.diagonal()))
    S = (d @ A @ d).tocsc()
    hi = eigsh(S, 1, which="LA", return_eigenvectors=False)[0]
    lo = eigsh(S, 1, sigma=0.0, which="LM", return_eigenvectors=False)[0]
    return float(hi / lo)


@pytest.fixture(scope="module")
def easy():
    A = _shifted_laplacian(100, 0.05)
    b = np.random.default_rng(3).standard_normal(A.shape[0])
    return A, b


def test_an_easy_matrix_stays_with_jacobi_and_meets_rtol(easy):
    A, b = easy
    x, rep = solve(A, b, rtol=1e-10)           # the default: preconditioner "auto"
    facts = rep.preconditioner["auto"]
    assert rep.chosen == "jacobi" and rep.method == "pcg-jacobi"
    first, last = facts["decisions"][0], facts["decisions"][-1]
    assert first["iterations"] == auto.PROBE_ITERATIONS and "switched_at" not in facts
    assert all(d["predicted_jacobi_s"] <= d["predicted_cycle_s"] for d in facts["decisions"])
    assert last["iterations"] == facts["iterations"] < rep.iterations
    assert rep.converged and rep.true_residual <= 1e-10
    assert _true_residual(A, b, x) <= 1e-10


def test_the_probe_kappa_is_a_lower_bound_near_the_true_one(easy):
    """The Lanczos estimate after the 32-iteration probe, against ARPACK's kappa(D^-1 A) = 155 of this matrix: within
    a factor 1.5 below (the smallest Ritz value approaches lambda_min from above), never above."""
    A, b = easy
    _, rep = solve(A, b, rtol=1e-10)
    estimate, true = rep.preconditioner["auto"]["decisions"][0]["kappa_lanczos"], _kappa_jacobi(A)
    print(f"\nkappa(D^-1 A): Lanczos after {auto.PROBE_ITERATIONS} iterations {estimate:.4g}, ARPACK {true:.4g}")
    assert true / 1.5 <= estimate <= true * (1 + 1e-8)


def test_an_unresolved_probe_underestimates_kappa_and_says_so():
    """Poisson P1 128 x 128 (kappa(D^-1 A) ~ 6.6e3): the 64-iteration probe sees less than half of it (its Ritz
    values as a NumPy Jacobi-PCG's give them), still growing as k^2.3 since 32 iterations: the prediction is doubled;
    the reason writes the estimate as a lower bound."""
    p = tp.poisson_p1(128)
    _, rep = solve(p.A, p.b, rtol=1e-8)
    first = rep.preconditioner["auto"]["decisions"][0]
    reference = auto.Probe.of(*_probe_coefficients(p.A, p.b, auto.PROBE_ITERATIONS), rtol=1e-8)
    true = _kappa_jacobi(p.A)
    print(f"\nkappa(D^-1 A): Lanczos after {first['iterations']} iterations {first['kappa_lanczos']:.4g}, ARPACK "
          f"{true:.4g}")
    assert first["iterations"] == reference.iterations
    assert first["kappa_lanczos"] == pytest.approx(reference.kappa, rel=1e-6)
    assert first["kappa_lanczos"] < true / 2
    assert first["kappa_growth"] == pytest.approx(reference.growth, rel=1e-6) and reference.growth > 2.2
    assert first["unseen_factor"] == auto.UNSEEN_FACTOR
    assert "kappa(D^-1 A) >= " in rep.chosen_why


def test_the_ritz_growth_sets_the_unseen_factor():
    """kappa_k = kappa_j (k / j)^g: g = 2 while the smallest Ritz value falls as lambda_max / k^2 (the prediction
    doubled), none at g <= 1 (settled), linear in between; the factor stays with the probe for later residuals."""
    assert auto.ritz_growth(128, 4000.0, 64, 1000.0) == pytest.approx(2.0)
    assert auto.ritz_growth(128, 1000.0, 64, 1000.0) == 0.0 and math.isnan(auto.ritz_growth(128, math.nan, 64, 1.0))
    assert [auto.unseen_factor(g) for g in (math.nan, 0.5, 1.0, 1.25, 1.5, 2.3)] == [1.0, 1.0, 1.0, 1.5, 2.0, 2.0]
    probe = auto.Probe(iterations=128, kappa=4e3, rate=0.02, residual=1e-4, remaining=0, growth=2.0, factor=2.0)
    assert probe.at(1e-5, 1e-8) == math.ceil(2 * auto.predict_remaining(4e3, 0.02, 1e-5, 1e-8)) == 482


@pytest.mark.parametrize("make, actual", [(lambda: amg_family.member("lognormal-var4", "small"), 768),
                                          (lambda: tp.anisotropic(256, 1e-4), 1416)])
def test_the_unseen_factor_brings_the_prediction_near_the_count(make, actual):
    """After 128 iterations the Lanczos kappa still grows as k^1.5-1.7 (16,129 and 65,025 unknowns): the smaller of
    the bound's and the rate's predictions is 2.4x and 1.7x below the remaining Jacobi-PCG iterations (640, 1,288);
    doubled it is within 1.25x of them (0.84x, 1.18x)."""
    p = make()
    _, plain = solve(p.A, p.b, rtol=1e-8, preconditioner="jacobi")
    probe = auto.Probe.of(*_probe_coefficients(p.A, p.b, 128), rtol=1e-8)
    unscaled = auto.predict_remaining(probe.kappa, probe.rate, probe.residual, 1e-8)
    remaining = plain.iterations - 128
    print(f"\ngrowth k^{probe.growth:.2f}: predicted {unscaled} x {probe.factor:.2f} = {probe.remaining}, "
          f"remaining {remaining}")
    assert plain.iterations == actual
    assert probe.growth > auto.GROWTH_UNSEEN - 0.05 and probe.factor > 1.9
    assert unscaled < remaining / 1.6
    assert remaining / 1.25 < probe.remaining < 1.25 * remaining


def test_a_matrix_where_amg_clearly_pays_switches_at_the_second_point():
    """lognormal-var4 (16,129 unknowns): Jacobi-PCG needs 768 iterations, AMG-PCG 8 after its set-up (on NumPy
    Jacobi-PCG took about 3x AMG's time). At 64 iterations the doubled prediction (348) is still below the model's
    AMG cost; at 128 (538) above: the switch, and AMG-PCG ends it within 16 iterations."""
    p = amg_family.member("lognormal-var4", "small")
    x, rep = solve(p.A, p.b, rtol=1e-8)
    facts = rep.preconditioner["auto"]
    first, second = facts["decisions"]
    assert (first["predicted_jacobi_iterations"], second["predicted_jacobi_iterations"]) == (348, 538)
    assert first["unseen_factor"] == second["unseen_factor"] == auto.UNSEEN_FACTOR
    assert first["predicted_jacobi_s"] < first["predicted_cycle_s"] < second["predicted_jacobi_s"]
    assert facts["switched_at"] == 128 and rep.chosen == "amg" and rep.iterations <= 128 + 16
    assert rep.converged and _true_residual(p.A, p.b, x) <= 1e-8


def _probe_coefficients(A, b, k: int):
    """alpha, beta and the relative residuals of k Jacobi-PCG iterations from 0 (a reference in NumPy)."""
    dinv = 1.0 / A.diagonal()
    x, r = np.zeros_like(b), b.copy()
    z = dinv * r
    p, rz = z.copy(), r @ z
    alpha, beta, res = [], [], [1.0]
    for _ in range(k):
        q = A @ p
        a = rz / (p @ q)
        x += a * p
        r -= a * q
        z = dinv * r
        rz_new = r @ z
        alpha.append(a)
        beta.append(rz_new / rz)
        p = z + beta[-1] * p
        rz = rz_new
        res.append(float(np.linalg.norm(r) / np.linalg.norm(b)))
    return alpha, beta, res


def test_an_anisotropic_problem_switches_to_amg_and_meets_rtol():
    """eps 1e-4 at 30 degrees, 65,025 unknowns: Jacobi-PCG needs about 1,400 iterations, past the NumPy cost model's
    break-even with the AMG set-up, so the probe switches; the AMG-PCG continues from its iterate."""
    p = tp.anisotropic(256, 1e-4)
    x, rep = solve(p.A, p.b, rtol=1e-8)
    facts = rep.preconditioner["auto"]
    print(f"\n{rep.chosen_why}\n{rep.iterations} iterations, switched at {facts.get('switched_at')}")
    assert rep.chosen == "amg" and rep.method == "cg+amg" and rep.preconditioner["kind"] == "amg"
    assert rep.chosen_why.startswith("auto: amg (probe: ") and facts["kind"] == "cpu"
    assert facts["switched_at"] in _points_up_to(facts["switched_at"])
    assert facts["predicted_jacobi_s"] > facts["predicted_cycle_s"]
    assert rep.converged and _true_residual(p.A, p.b, x) <= 1e-8
    assert rep.iterations > facts["switched_at"] and len(rep.history_recursive) == rep.iterations + 1


def _points_up_to(k: int) -> list[int]:
    out = []
    for point in auto.decision_points():
        if point > k:
            return out
        out.append(point)


def test_the_rule_weighs_the_gpu_model_at_a_million_unknowns():
    """The GPU cost model at 1M unknowns (7 nonzeros a row): a few hundred more Jacobi-PCG iterations stay, a few
    thousand pay for the AMG set-up."""
    model = auto.CostModel.of("gpu", FP64, 1_000_000, 7_000_000)
    assert model.setup_s > 100 * model.probe_s and model.cycle_s > model.probe_s

    def probe(remaining):
        return auto.Probe(iterations=64, kappa=math.nan, rate=math.nan, residual=1e-2, remaining=remaining)

    stay, jacobi_s, cycle_s = model.weigh(probe(300), 1e-8)
    switch, _, _ = model.weigh(probe(3000), 1e-8)
    assert not stay and switch
    assert jacobi_s == pytest.approx(300 * model.probe_s)
    assert cycle_s == pytest.approx(model.setup_s + model.cycle_iterations(1e-8) * model.cycle_s)
    assert model.cycle_iterations(1e-8) == 32              # 40 for 1e-10: counted from the initial residual


def test_the_report_names_the_choice_and_why(easy):
    A, b = easy
    _, rep = solve(A, b, rtol=1e-10)
    assert rep.chosen_why.startswith("auto: jacobi (probe: ") and "Jacobi-PCG iterations, kappa(D^-1 A) >= " in rep.chosen_why
    assert "cost model" in rep.chosen_why and rep.chosen_why in rep.notes
    assert "chosen='jacobi'" in repr(rep)
    _, named = solve(A, b, rtol=1e-10, method="cg")              # a named method: what it means, said so
    assert named.chosen == "none" and named.chosen_why == "auto: none (method 'cg' named: no preconditioner (plain CG))"
    _, tiny = solve(_shifted_laplacian(10, 0.05), np.ones(100))
    assert tiny.chosen == "jacobi" and tiny.chosen_why.startswith("auto: jacobi (n = 100: n Jacobi-PCG iterations")
    _, explicit = solve(A, b, rtol=1e-10, preconditioner="jacobi")
    assert explicit.chosen == "" and explicit.chosen_why == "" and "auto" not in explicit.preconditioner


@pytest.mark.parametrize("make", [lambda: _shifted_laplacian(100, 0.05),
                                  lambda: amg_family.member("poisson3d", "medium").A])
def test_the_probe_iterations_are_kept(make):
    """Auto's Jacobi-PCG runs on in the probe's recurrences, its decision points on its blocks' ends: its count is
    plain Jacobi-PCG's exactly (decision points every 32 iterations split the 64-iteration blocks and stopped up to
    32 iterations from it), and every iteration is in the history. The 3D Laplacian (110,592 unknowns, 200
    iterations) stays with Jacobi: its Lanczos kappa grows as k^0.9 or slower from 64 iterations on."""
    A = make()
    b = np.random.default_rng(3).standard_normal(A.shape[0])
    _, plain = solve(A, b, rtol=1e-9, preconditioner="jacobi")
    _, rep = solve(A, b, rtol=1e-9)
    print(f"\nJacobi-PCG {plain.iterations}, auto {rep.iterations}: {rep.chosen_why}")
    assert rep.chosen == "jacobi" and rep.converged
    assert rep.iterations == plain.iterations and len(rep.history_recursive) == rep.iterations + 1
    assert np.allclose(rep.history_recursive, plain.history_recursive, rtol=1e-12, atol=0)
    assert rep.history_true_iterations[-1] == rep.iterations


def test_true_every_records_stay_on_its_multiples(easy):
    A, b = easy
    _, rep = solve(A, b, rtol=1e-10, true_every=20)
    its = rep.history_true_iterations.tolist()
    assert set(range(20, rep.iterations - 19, 20)) <= set(its) and its == sorted(its)


def test_amg_that_loses_on_its_first_iterations_goes_back_to_jacobi(monkeypatch):
    """A model under which AMG's set-up is cheap and its iteration dear (20 Jacobi-PCG iterations): the probe
    switches at once, then AMG's measured rate (elasticity without its rigid-body modes: hundreds of V-cycles, 1,352
    Jacobi-PCG iterations) says it would cost more than twice Jacobi-PCG's prediction, and the solve goes back to
    Jacobi-PCG."""
    p = amg_family.member("cook-nu0.45-nonull", "small")
    model = auto.CostModel("test", probe_s=1e-4, cycle_s=2e-3, setup_s=1e-3, cycle_per_decade=1.0)
    monkeypatch.setattr(auto.CostModel, "of_matrix", classmethod(lambda cls, A, policy, coarse_size=400: model))
    x, rep = solve(p.A, p.b, rtol=1e-8)
    facts = rep.preconditioner["auto"]
    print(f"\n{rep.chosen_why}\n{rep.iterations} iterations")
    assert facts["switched_at"] == auto.PROBE_ITERATIONS and rep.chosen == "jacobi"
    assert "back to jacobi" in rep.chosen_why and rep.method == "pcg-jacobi"
    assert rep.converged and _true_residual(p.A, p.b, x) <= 1e-8
    assert len(rep.history_recursive) == rep.iterations + 1


def test_an_amg_set_up_that_refuses_the_matrix_leaves_jacobi_running(monkeypatch, easy):
    A, b = easy

    def refuse(self, A):
        raise CaseError.invalid("multigrid", "this matrix", "another", why="a set-up that refuses (the test's)")

    model = auto.CostModel("test", probe_s=1.0, cycle_s=1e-6, setup_s=1e-6, cycle_per_decade=1.0)
    monkeypatch.setattr(auto.CostModel, "of_matrix", classmethod(lambda cls, A, policy, coarse_size=400: model))
    monkeypatch.setattr(Multigrid, "setup", refuse)
    x, rep = solve(A, b, rtol=1e-10)
    assert rep.chosen == "jacobi" and "set-up refused the matrix" in rep.chosen_why and rep.method == "pcg-jacobi"
    assert rep.converged and _true_residual(A, b, x) <= 1e-10 and "switched_at" not in rep.preconditioner["auto"]


@pytest.mark.parametrize("precision, rtol", [("fp32", 1e-5), ("mixed", 1e-10)])
def test_float32_and_mixed_auto_meet_their_targets(easy, precision, rtol):
    A, b = easy
    x, rep = solve(A, b, precision=precision, rtol=rtol)
    assert rep.chosen == "jacobi" and rep.converged and _true_residual(A, b, x) <= rtol
    assert len(rep.history_recursive) == rep.iterations + 1
    if precision == "mixed":       # the mixed method restarted from the float32 probe's iterate, its count after it
        assert "restarted from the float32 probe's iterate" in rep.chosen_why
        assert rep.history_true_iterations.tolist() == sorted(rep.history_true_iterations.tolist())


def test_mixed_auto_switches_to_amg_on_the_anisotropic_problem():
    p = tp.anisotropic(256, 1e-4)
    x, rep = solve(p.A, p.b, precision="mixed", rtol=1e-8)
    assert rep.chosen == "amg" and rep.method == "cg-reliable+amg"
    assert rep.converged and _true_residual(p.A, p.b, x) <= 1e-8


def test_a_prepared_matrix_and_multigrid_options(easy):
    A, b = easy
    M = prepare_matrix(A)
    x, rep = solve(M, b, rtol=1e-10, multigrid={"coarse_size": 200})
    assert rep.chosen == "jacobi" and _true_residual(A, b, x) <= 1e-10
    with pytest.raises(CaseError, match="coarse_size"):       # the AMG options are checked before the solve
        solve(M, b, multigrid={"coarse_size": -3})


@pytest.mark.cudasim
@pytest.mark.parametrize("forced", [False, True])
def test_the_device_path_takes_numpys_decisions(monkeypatch, forced):
    """Numba-CUDA (the simulator) runs the same probe, switch and counts as NumPy: n = 529 is small enough for Jacobi
    under either backend's model; a model that makes AMG pay switches both at the first point."""
    p = tp.anisotropic(24, 1e-4)
    if forced:
        model = auto.CostModel("test", probe_s=1.0, cycle_s=1e-6, setup_s=1e-6, cycle_per_decade=1.0)
        monkeypatch.setattr(auto.CostModel, "of_matrix", classmethod(lambda cls, A, policy, coarse_size=400: model))
    x, dev = solve(p.A, p.b, backend="numba-cuda", rtol=1e-8, check_every=16)
    _, cpu = solve(p.A, p.b, backend="numpy", rtol=1e-8, check_every=16)
    assert dev.chosen == cpu.chosen == ("amg" if forced else "jacobi")
    assert dev.iterations == cpu.iterations and dev.method == cpu.method
    assert dev.converged and _true_residual(p.A, p.b, x) <= 1e-8


def test_a_near_null_space_given_to_solve_reaches_the_amg_and_is_refused_where_unused():
    """solve(..., near_nullspace=B): the rigid-body modes of Cook's membrane reach 'amg' (fewer iterations than the
    constant vector: 21 against 60 at 544 unknowns); a preconditioner that takes none says so, naming the field."""
    P = tp.cook(16)
    _, with_b = solve(P.A, P.b, preconditioner="amg", near_nullspace=P.near_nullspace, rtol=1e-8)
    _, without = solve(P.A, P.b, preconditioner="amg", rtol=1e-8)
    assert with_b.converged and without.converged
    assert with_b.iterations < 0.6 * without.iterations, (with_b.iterations, without.iterations)
    with pytest.raises(CaseError, match="near_nullspace"):
        solve(P.A, P.b, preconditioner="jacobi", near_nullspace=P.near_nullspace)
