"""The float64 reference (hpcsolve.fem.api.factor_solve, the spsolve method) and the run's plan for it
(hpcsolve.fem.memory.reference_plan): symmetric-mode SuperLU for SPD matrices, the general factorization where that
fails, its time and kind in every summary, skipped with a note beyond its budget."""

import math
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from hpcsolve.core.cases import load_case
from hpcsolve.core.precision import get_precision
from hpcsolve.fem import memory as fem_memory, runner
from hpcsolve.fem.api import REFERENCE_GENERAL, REFERENCE_SYMMETRIC, factor_solve, solve
from hpcsolve.fem.discrete import problem

CASES = Path(__file__).resolve().parents[2] / "cases"


def test_spd_fem_matrix_takes_the_symmetric_factorization():
    disc = problem.build(load_case(CASES / "cook_membrane.toml", ["mesh.nx=12"]))
    x, true, kind = factor_solve(disc.A, disc.b)
    assert kind == REFERENCE_SYMMETRIC
    assert true < 1e-12
    x_ref = spla.spsolve(disc.A.tocsc(), disc.b)
    assert np.linalg.norm(x - x_ref) <= 1e-10 * np.linalg.norm(x_ref)


def test_indefinite_matrix_falls_back_to_pivoting():
    """Symmetric, positive diagonal, indefinite (2 x 2 blocks [[d, 1], [1, d]], d = 1e-12): without pivoting the
    factorization grows by 1/d and its residual is far above 1e-10; factor_solve then pivots and is accurate."""
    d = 1e-12
    A = sp.block_diag([sp.csr_matrix([[d, 1.0], [1.0, d]])] * 20).tocsr()
    b = np.arange(1.0, 41.0)
    lu = spla.splu(A.tocsc(), permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options=dict(SymmetricMode=True))
    naive = np.linalg.norm(b - A @ lu.solve(b)) / np.linalg.norm(b)
    assert not naive <= 1e-10                      # the fallback is needed here (nan counts too)
    x, true, kind = factor_solve(A, b)
    assert kind == REFERENCE_GENERAL and true <= 1e-14
    x2, rep = solve(A, b, method="spsolve")
    assert rep.converged and any(REFERENCE_GENERAL in n for n in rep.notes)


def test_plan_skips_beyond_its_budget_and_always_forces():
    case = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=64"])
    n = 63 * 63
    run, predicted, note = fem_memory.reference_plan(case, n)
    assert run and note == "" and predicted == pytest.approx(fem_memory.REFERENCE_SECONDS[1] * n ** 1.5)
    tight = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=64", f"solve.reference_max_seconds={predicted / 2}"])
    run, _, note = fem_memory.reference_plan(tight, n)
    assert not run and note.startswith("skipped: predicted") and "solve.reference = 'always'" in note
    forced = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=64", "solve.reference=always"])
    assert fem_memory.reference_plan(forced, n)[0]
    never = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=64", "solve.reference=never"])
    assert fem_memory.reference_plan(never, n)[2] == "not made (solve.reference = 'never')"


@pytest.mark.parametrize("setting", ["auto", "never"])
def test_every_summary_names_the_reference_and_its_time(setting):
    case = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=32", f"solve.reference={setting}",
                                                           "output.plots=false"])
    res = runner.run(case, "numpy", get_precision("fp64", family="fem"))
    assert "reference_s" in res.timings
    if setting == "auto":
        assert res.metrics["reference"] == f"made: float64 {REFERENCE_SYMMETRIC}"
        assert res.timings["reference_s"] > 0.0
        assert res.metrics["error_vs_fp64_reference"] < 1e-6
        assert res.metrics["reference_error_l2"] == pytest.approx(res.metrics["error_l2"], rel=1e-3)
    else:
        assert res.metrics["reference"] == "not made (solve.reference = 'never')"
        assert res.timings["reference_s"] == 0.0


def _system(nx=24):
    case = load_case(CASES / "poisson_manufactured.toml", [f"mesh.nx={nx}", "output.plots=false"])
    return case, problem.build(case)


def test_a_reference_beside_the_solve_gives_the_metrics_of_one_in_line():
    """``hpcsolve.fem.reference``: the factorization in its own thread (GPU runs) gives the metrics of the one made
    after the solve (CPU runs) exactly; the kind says where it ran; the run's wait and its own time are both set."""
    from hpcsolve.fem import reference

    case, disc = _system()
    x = spla.spsolve(disc.A.tocsc(), disc.b) * (1 + 1e-6)
    out = {}
    for beside in (False, True):
        ref = reference.Reference(disc, case.solve.rtol, beside=beside)
        ref.start()
        timings: dict = {}
        out[beside] = ref.metrics(disc, x, timings)
        assert ref.ran_in == ("hpcsolve-fem-reference" if beside else "MainThread")
        assert timings["reference_s"] > 0.0
        if not beside:                     # in line: the wait is the solve itself and more (nested timers)
            assert timings["reference_wait_s"] >= timings["reference_s"]
    assert out[True]["reference"] == f"{out[False]['reference']} ({reference.BESIDE})"
    assert out[False]["reference"] == f"made: float64 {REFERENCE_SYMMETRIC}"
    for key in ("reference_true_residual", "error_vs_fp64_reference", "reference_error_l2"):
        assert out[True][key] == out[False][key], key
    assert out[True]["error_vs_fp64_reference"] == pytest.approx(1e-6, rel=1e-3)


def test_an_error_in_the_reference_thread_reaches_the_run(monkeypatch):
    from hpcsolve.core.errors import CaseError
    from hpcsolve.fem import reference

    def broken(*args, **kwargs):
        raise CaseError.invalid("A", "a broken matrix", "an SPD matrix")

    monkeypatch.setattr(reference, "solve", broken)
    case, disc = _system(8)
    monkeypatch.setattr(reference.DirectSolve, "factorize", broken)
    ref = reference.Reference(disc, case.solve.rtol, beside=True)
    ref.start()
    with pytest.raises(CaseError, match="a broken matrix"):
        ref.metrics(disc, np.zeros(disc.A.shape[0]), {})
    ref = reference.Reference(disc, case.solve.rtol, beside=False)          # in line: the same error
    with pytest.raises(CaseError, match="a broken matrix"):
        ref.metrics(disc, np.zeros(disc.A.shape[0]), {})


@pytest.mark.parametrize("gpu,simulator,ranks,cores,want", [(False, False, 1, 16, False), (True, False, 1, 1, False),
                                                           (True, False, 1, 2, True), (True, True, 1, 16, False),
                                                           (True, False, 2, 16, False)])
def test_only_a_gpu_run_with_a_spare_core_factorizes_beside_its_solve(monkeypatch, gpu, simulator, ranks, cores, want):
    """A GPU on a real device (the CUDA simulator needs the GIL), one rank, a spare host core."""
    from types import SimpleNamespace

    from hpcsolve.fem import reference

    monkeypatch.setattr(reference, "host_cores", lambda: cores)
    assert reference.beside(SimpleNamespace(gpu=gpu, simulator=simulator), ranks) is want


def test_a_failed_run_waits_for_its_reference(monkeypatch):
    """A run that raises while its reference factorizes leaves no factorization running behind it (compare goes on
    to time its next run)."""
    from hpcsolve.core.errors import CaseError
    from hpcsolve.fem import reference

    import threading

    made, abandoned, failed = [], [], threading.Event()

    class Spy(reference.Reference):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

        def abandon(self):
            abandoned.append(self.running())
            super().abandon()

    def failing_probe(*args, **kwargs):
        failed.set()
        raise CaseError.invalid("output.probe", "x", "y")

    factorize = reference.DirectSolve.factorize

    def slow_factorize(self):             # still factorizing when the run fails (no timing: an event)
        failed.wait(60)
        factorize(self)

    monkeypatch.setattr(reference.DirectSolve, "factorize", slow_factorize)
    monkeypatch.setattr(runner, "beside", lambda be, ranks=1: True)
    monkeypatch.setattr(runner, "Reference", Spy)
    monkeypatch.setattr(runner, "probe_metrics", failing_probe)
    case = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=48", "solve.reference=always",
                                                           "output.plots=false"])
    with pytest.raises(CaseError):
        runner.run(case, "numpy", get_precision("fp64", family="fem"))
    assert len(made) == 1 and made[0].thread is not None and not made[0].thread.is_alive()
    assert len(abandoned) == 1                   # the run's error went through abandon(), which waited
    assert made[0].direct.y is not None          # it finished its factorization before the error went on


def test_a_cpu_run_makes_its_reference_in_line():
    case = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=16", "solve.reference=always",
                                                           "output.plots=false"])
    res = runner.run(case, "numpy", get_precision("fp64", family="fem"))
    assert res.metrics["reference"] == f"made: float64 {REFERENCE_SYMMETRIC}"
    assert res.timings["reference_wait_s"] >= res.timings["reference_s"] > 0.0


@pytest.mark.parametrize("plots", [True, False])
def test_a_run_waiting_for_its_reference_warms_up_its_plots(monkeypatch, plots):
    """While the reference factorizes beside the solve, a run that will plot imports its figures' library then
    (``plotstyle.warm_up``); one without plots does not; the metrics are those of the reference in line."""
    from hpcsolve.core import plotstyle
    from hpcsolve.fem import reference

    calls = []
    monkeypatch.setattr(runner, "beside", lambda be, ranks=1: True)
    monkeypatch.setattr(reference.Reference, "running", lambda self: True)
    monkeypatch.setattr(plotstyle, "warm_up", lambda: calls.append(1))
    case = load_case(CASES / "poisson_manufactured.toml", ["mesh.nx=16", "solve.reference=always",
                                                           f"output.plots={str(plots).lower()}"])
    res = runner.run(case, "numpy", get_precision("fp64", family="fem"))
    assert calls == ([1] if plots else [])
    assert res.metrics["reference"] == f"made: float64 {REFERENCE_SYMMETRIC} ({reference.BESIDE})"
    assert res.metrics["error_vs_fp64_reference"] < 1e-8
    assert ("plots_warm_up_s" in res.timings) == plots


def test_the_plots_warm_up_imports_what_the_figures_need():
    """In a fresh interpreter (nothing imported before): the figures' modules are there after ``warm_up``."""
    import subprocess
    import sys

    code = ("import sys; from hpcsolve.core import plotstyle; before = 'matplotlib.tri' in sys.modules; "
            "plotstyle.warm_up(); print(before, all(m in sys.modules for m in ('matplotlib.tri', "
            "'mpl_toolkits.axes_grid1', 'matplotlib.backends.backend_agg')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "MPLBACKEND": "Agg"})
    assert out.stdout.split() == ["False", "True"], out.stderr


def test_a_reference_beside_the_work_after_the_solve_counts_the_longer_of_the_two():
    from hpcsolve.fem.reference import with_reference

    assert with_reference(1.0, 2.0, 0.5, overlap=False) == 3.5
    assert with_reference(1.0, 2.0, 0.5, overlap=True) == 3.0
    assert with_reference(1.0, 0.25, 0.5, overlap=True) == 1.5


def test_the_reference_is_made_once_and_its_wait_counts_its_work_on_the_run_thread():
    from hpcsolve.fem import reference

    case, disc = _system(16)
    x = spla.spsolve(disc.A.tocsc(), disc.b)
    for beside in (False, True):
        ref = reference.Reference(disc, case.solve.rtol, beside=beside)
        ref.start()
        first, t1 = ref.metrics(disc, x, {}), {}
        again = ref.metrics(disc, x, t1)
        assert again == first and t1["reference_s"] == ref.seconds
        if beside:
            assert ref.prepare_s > 0 and t1["reference_wait_s"] >= ref.prepare_s
