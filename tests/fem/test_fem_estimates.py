"""The FEM run estimate (hpcsolve/fem/estimate.py): predicted iterations within 2x of the run's for every shipped FEM
case, precision and preconditioner at small sizes above the calibration mesh; the same answer twice, whatever the
cache; the stop of float32 CG (the stall checks, not maxiter) and budgets that follow from it. Times are not asserted
(scripts/fem_estimate_check.py measures them)."""

from pathlib import Path

import pytest

from hpcsolve import run as runmod
from hpcsolve.core.cases import load_case
from hpcsolve.core.precision import get_precision
from hpcsolve.fem import estimate, runner
from hpcsolve.fem.choices import fem_mesh_size, structured_mesh

CASES = Path(__file__).resolve().parents[2] / "cases"
QUIET = ["solve.reference='never'", "output.plots=false"]


def fem_cases() -> list[str]:
    return sorted(p.name for p in CASES.glob("*.toml") if load_case(p).solver == "fem")


#: sizes above the calibration mesh (CALIBRATION_UNKNOWNS), each run well under a second on NumPy
SIZES = {"poisson_manufactured.toml": ["mesh.nx=64", "mesh.nx=128"],
         "cook_membrane.toml": ["mesh.nx=48", "mesh.nx=64"],
         "heat_plate_with_hole.toml": ["mesh.refine=2", "mesh.refine=3"],
         # the element-generic cases at one size each (their runs take longer per unknown)
         "poisson_p2.toml": ["mesh.nx=48"],
         "poisson3d_manufactured.toml": ["mesh.nx=20"],
         "thick_cylinder.toml": ["mesh.nx=8"]}


def configurations():
    for name in fem_cases():
        case = load_case(CASES / name)
        structured = structured_mesh(case, None)
        for size in SIZES[name]:
            for precision in ("fp64", "fp32", "mixed"):
                for pc in ("none", "jacobi", "mg", "amg"):
                    if pc != "mg" or structured:
                        yield name, size, precision, pc


def _predict_and_run(name, size, precision, pc):
    case = load_case(CASES / name, [size, f"solve.preconditioner='{pc}'", *QUIET])
    policy = get_precision(precision, family="fem")
    desc = runner.FAMILY.describe(case, "numpy", policy)
    est = runner.FAMILY.estimate_runtime(case, "numpy", policy, desc)
    res = runner.run(case, "numpy", policy, mesh=desc.setup)
    return est, res


def test_every_shipped_fem_case_has_sizes_here():
    assert set(fem_cases()) == set(SIZES), "a new FEM case: give it sizes in SIZES"


@pytest.mark.parametrize("name, size, precision, pc", list(configurations()))
def test_predicted_iterations_are_within_2x_of_the_run(name, size, precision, pc):
    est, res = _predict_and_run(name, size, precision, pc)
    coarse, _ = estimate.calibration_case(load_case(CASES / name, [size]), pc)
    assert 3 * fem_mesh_size(coarse)[0] <= res.derived["points"]     # calibrated on a coarser mesh: a prediction
    measured = int(res.metrics["iterations"])
    q = est["estimated_iterations"] / measured
    print(f"{name} {size} {precision}/{pc}: predicted {est['estimated_iterations']}, measured {measured} "
          f"({q:.2f}x; {res.metrics['reason'][:60]})")
    assert 0.5 <= q <= 2.0, est["estimate_basis"]


def test_the_estimate_is_the_same_twice_and_without_its_cache():
    """Nothing timed: a second call, and one after the calibration cache is emptied, give identical numbers."""
    args = (CASES / "poisson_manufactured.toml", "numpy", "fp32", ["mesh.nx=96", "solve.preconditioner='jacobi'"])
    first = runmod.describe(*args, estimate=True)
    second = runmod.describe(*args, estimate=True)
    estimate._CAL_RESULTS.clear()
    third = runmod.describe(*args, estimate=True)
    keys = ("estimated_seconds", "estimated_iterations", "estimate_basis")
    assert [first[k] for k in keys] == [second[k] for k in keys] == [third[k] for k in keys]
    assert first["estimated_iterations"] > 0 and first["estimated_seconds"] > 0


def test_float32_cg_is_predicted_to_stop_at_its_stall_not_at_maxiter():
    """The issue's case: Poisson 256^2, fp32, mg stopped after 13 iterations (the stall checks); the old probe
    predicted 650,250 (maxiter). Here the prediction is within 2x of the run's count and far below maxiter, and
    compare's --budget 60 would not skip it."""
    from hpcsolve.report import compare_reference

    over = ["mesh.nx=256", "solve.preconditioner='mg'", *QUIET]
    info = runmod.describe(CASES / "poisson_manufactured.toml", "numpy", "fp32", over, estimate=True)
    res = runmod.run_case(CASES / "poisson_manufactured.toml", "numpy", "fp32", overrides=over, progress=False,
                          plots=False)
    assert "stalled" in res.metrics["reason"]
    measured = int(res.metrics["iterations"])
    assert 0.5 <= info["estimated_iterations"] / measured <= 2.0, (info["estimated_iterations"], measured)
    assert info["estimated_iterations"] < 100 < res.derived["free_unknowns"]
    case = load_case(CASES / "poisson_manufactured.toml", over)
    seconds, basis, _ = compare_reference.estimate(case, "numpy", "fp32")
    assert seconds is not None and seconds < 60, basis


@pytest.mark.parametrize("precision, tail", [("fp64", 0), ("fp32", 3), ("mixed", 0)])
def test_the_stop_adds_the_stall_checks_only_where_float32_recurrences_stall(precision, tail):
    """Past two blocks a V-cycle's stall checks are one iteration each: fp32 stops 3 checks after meeting rtol."""
    case = load_case(CASES / "poisson_manufactured.toml", QUIET)
    policy = get_precision(precision, family="fem")
    method = runner.method_of(case, policy)
    stall = estimate.stalls(policy, method, 1e4, case.solve.rtol)      # kappa 1e4: float32 attains ~6e-4 > rtol
    assert estimate._stop(case, policy, "mg", method, 10.2, stall) == 11 + tail


def test_float32_is_not_predicted_to_stall_where_kappa_times_its_roundoff_is_below_rtol():
    policy = get_precision("fp32", family="fem")
    assert estimate.stalls(policy, "cg", 1e3, 1e-8) and not estimate.stalls(policy, "cg", 1e3, 1e-3)
    assert not estimate.stalls(get_precision("fp64", family="fem"), "cg", 1e3, 1e-10)
    assert estimate.stalls(get_precision("fp64", family="fem"), "cg", 1e4, 1e-13)    # 1e4 x 1.1e-16 > 1e-13


@pytest.mark.parametrize("overlap", [False, True])
def test_the_estimate_counts_a_reference_beside_the_solve_once(monkeypatch, overlap):
    """The reference after the solve (CPU) adds to the errors and fields; beside them (GPU) the longer counts."""
    monkeypatch.setattr(estimate, "beside", lambda be, ranks=1: overlap)
    case = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=24", "solve.reference=always",
                                                           "output.plots=false"])
    policy = get_precision("fp64", family="fem")
    desc = runner.FAMILY.describe(case, "numpy", policy)
    info = runner.FAMILY.estimate_runtime(case, "numpy", policy, desc)
    monkeypatch.setattr(estimate, "beside", lambda be, ranks=1: not overlap)
    other = runner.FAMILY.estimate_runtime(case, "numpy", policy, desc)
    basis = info["estimate_basis"]
    assert ("beside it (the longer counts)" in basis) == overlap
    assert ("+ float64 reference (SuperLU)" in basis) == (not overlap)
    # in line the reference and the errors add; beside each other only the longer counts
    assert (info["estimated_seconds"] < other["estimated_seconds"]) == overlap


def test_a_compare_budget_skips_by_the_model_only_what_is_predicted_past_it():
    """The issue's compare: Poisson 256^2 with jacobi, mg and amg under --budget 60 skipped fp32/mg ("predicted 1 h 25
    min"; it takes 0.19 s). Now nothing is skipped at 60 s; a budget between the cheapest and the dearest
    prediction skips exactly the configurations predicted past it."""
    from hpcsolve.report import compare_reference

    case = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=256"])
    kw = dict(requested="auto", field_name="--reference", tolerance=1e-6, estimate_all=True, runs_each=1)
    plan, _ = compare_reference.make_plan(case, ["numpy"], ["fp64", "fp32", "mixed"], ["jacobi", "mg", "amg"],
                                          budget=60, **kw)
    assert plan.skip == {} and len(plan.predicted) == 9
    assert all(s is not None and s < 60 for s in plan.predicted.values()), plan.predicted
    ref_s = plan.predicted[compare_reference.key(*plan.configs[0])]
    dearest = max(plan.predicted.values())
    cut = (max(ref_s, sorted(plan.predicted.values())[-2]) + dearest) / 2    # above the reference, below the dearest
    tight, _ = compare_reference.make_plan(case, ["numpy"], ["fp64", "fp32", "mixed"], ["jacobi", "mg", "amg"],
                                           budget=cut, **kw)
    assert set(tight.skip) == {k for k, s in tight.predicted.items() if s > cut} != set()


@pytest.mark.parametrize("name, size", [("poisson_manufactured.toml", "mesh.nx=256"),
                                        ("heat_plate_with_hole.toml", "mesh.refine=3")])
def test_mixed_plain_cg_is_predicted_as_the_float64_run_times_the_calibrated_ratio(name, size):
    """Mixed plain CG grows with the mesh as the float64 run does, about a fixed ratio above it (Poisson 1.7-2.0,
    the heat plate 1.25-1.33): predicted within 1.3x at 64k and 46k unknowns (scaling the mixed calibration by
    unknowns^0.5 put Poisson 1.6x high here and 1.9x at 1M)."""
    est, res = _predict_and_run(name, size, "mixed", "none")
    measured = int(res.metrics["iterations"])
    assert "the float64 run's" in est["estimate_basis"]
    assert 1 / 1.3 <= est["estimated_iterations"] / measured <= 1.3, (est["estimate_basis"], measured)
    lo, hi = estimate.MIXED_RATIO
    assert estimate.mixed_ratio({"iterations": 150}, {"iterations": 50}) == hi
    assert estimate.mixed_ratio({"iterations": 40}, {"iterations": 50}) == lo
