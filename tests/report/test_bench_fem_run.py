"""hpcsolve bench fem's whole-run table (issue 33) on the CPU: a row per case x size x backend whose phases add up
to at most its total, the solve phase as the run's own timings hold it, skipped backends, the JSON and markdown."""

import json
import math

import pytest

from hpcsolve import cli
from hpcsolve.core import backends
from hpcsolve.core.precision import get_precision
from hpcsolve.report import bench_fem_run as wr

#: phases every run has (the reference is left out where a case makes none)
ALWAYS = ("mesh_s", "assembly_s", "boundary_conditions_s", "solver_setup_s", "solve_s", "norms_s", "output_s")


def _small(case):
    """The shipped case on a small mesh, without plots (the same run, faster)."""
    size = "mesh.refine=0" if case.mesh.kind == "file" else "mesh.nx=8"
    return case.with_overrides(size, "output.plots=false")


@pytest.fixture(scope="module")
def table():
    assert {c.name for c in wr.check_cases(None)} == {"poisson_manufactured", "heat_plate_with_hole", "cook_membrane",
                                                      "poisson_p2", "poisson3d_manufactured", "thick_cylinder"}
    # the table's mechanics on the three 2D P1 cases and one tetrahedral case (its cells halved once more: the
    # element-generic cases' own runs are tests/fem/discrete/test_simplex_problem.py's)
    cases = [_small(c) for c in wr.check_cases(["poisson_manufactured", "heat_plate_with_hole", "cook_membrane"])]
    cases.append(wr.check_cases(["poisson3d_manufactured"])[0].with_overrides("mesh.nx=4", "output.plots=false"))
    # a run without the reference phase
    cases = [c.with_overrides("solve.reference='never'") if c.name == "poisson_manufactured" else c for c in cases]
    missing = [b for b in backends.BACKENDS if not backends.get(b).available]
    result: dict = {}
    wr.whole_run_table(result, wr.plan(cases, (0, 1)), (*missing, "numpy"), repeats=2)
    return result, cases, missing


def test_a_row_per_case_size_and_backend_with_phases_within_the_total(table):
    result, cases, _ = table
    rows = result["whole_run"]
    assert [(r["case"], r["level"], r["backend"]) for r in rows] == [
        (c.name, level, "numpy") for c in cases for level in (0, 1)]
    for r in rows:
        phases = [r[k] for _, k in wr.COLUMNS if r[k] is not None]
        assert set(ALWAYS) <= {k for _, k in wr.COLUMNS if r[k] is not None}
        assert all(math.isfinite(v) and v >= 0 for v in phases)
        for run in r["runs"]:           # one run's phases are parts of its own total (no timing margin needed)
            assert sum(run[k] for _, k in wr.COLUMNS if run[k] is not None) <= run["total_s"] * (1 + 1e-9), run
        assert r["solve_share"] == pytest.approx(r["solve_s"] / r["total_s"])
        assert len(r["runs"]) == r["repeats"] == 2
        for k in wr.ROW_KEYS:           # each phase is the median of the timed runs
            values = [run[k] for run in r["runs"] if run[k] is not None]
            assert r[k] == (sum(values) / 2 if values else None)
    first = {r["case"]: r for r in rows if r["level"] == 0}
    refined = {r["case"]: r for r in rows if r["level"] == 1}
    assert first["poisson_manufactured"]["size"] == "mesh.nx=8" and first["poisson_manufactured"]["unknowns"] == 81
    assert refined["poisson_manufactured"]["size"] == "mesh.nx=16" and refined["poisson_manufactured"]["unknowns"] == 289
    assert refined["cook_membrane"]["unknowns"] == 2 * 17 * 17                   # two displacement components
    assert refined["heat_plate_with_hole"]["size"] == "mesh.refine=1"
    assert first["poisson_manufactured"]["reference_s"] is None                  # solve.reference = 'never'
    assert first["cook_membrane"]["reference_s"] > 0


def test_an_unavailable_backend_gives_a_note_and_no_row(table):
    result, _, missing = table
    if not missing:
        pytest.skip("every backend is usable here")
    notes = result["whole_run_settings"]["notes"]
    for name in missing:
        assert any(n.startswith(f"{name}: skipped, not available here") for n in notes), notes
        assert not [r for r in result["whole_run"] if r["backend"] == name]
    assert result["whole_run_settings"]["backends"] == ["numpy"]


def test_the_markdown_shows_every_row_and_a_dash_for_a_missing_phase(table):
    result, _, missing = table
    lines = wr.markdown(result)
    head = [line for line in lines if line.startswith("| case |")]
    assert head == ["| case | size (unknowns) | backend | mesh | assembly | BCs | set-up | solve | post | reference | "
                    "output | total | solve share |"]
    rows = [line for line in lines if line.startswith("| ") and "numpy" in line]
    assert len(rows) == len(result["whole_run"])
    no_ref = next(line for line in rows if line.startswith("| poisson_manufactured | mesh.nx=8 (81) |"))
    assert no_ref.split(" | ")[9] == "-"                     # the reference column
    assert len([line for line in lines if line.startswith("Note: ")]) == len(missing)


def test_the_solve_phase_is_the_runs_own_timing():
    case = _small(wr.check_cases(["poisson_manufactured"])[0])
    phases, res = wr.one_run(case, backends.get("numpy"), get_precision("fp64", family="fem"), plots=False)
    assert phases["solve_s"] == res.timings["solve_s"] > 0
    assert phases["total_s"] == phases["run_s"] + phases["output_s"]
    assert phases["status"] == res.status == "converged"


def test_bench_fem_writes_the_whole_run_table_into_its_json_and_markdown(tmp_path, capsys):
    out = tmp_path / "b"
    assert cli.main(["bench", "fem", "--quick", "--sizes", "64", "--precisions", "fp64", "--backends", "numpy",
                     "--no-multigrid", "--whole-run-cases", "poisson_manufactured", "--whole-run-levels", "0",
                     "--out", str(out)]) == 0
    data = json.loads((out / "bench_fem.json").read_text())
    (row,) = data["whole_run"]
    assert (row["case"], row["size"], row["unknowns"], row["backend"]) == ("poisson_manufactured", "mesh.nx=64",
                                                                           65 * 65, "numpy")
    assert data["whole_run_settings"]["repeats"] == 1 and data["whole_run_settings"]["levels"] == [0]
    md = (out / "bench_fem.md").read_text()
    assert f"| poisson_manufactured | mesh.nx=64 (4,225) | numpy | {row['mesh_s']:.4f} |" in md
    assert md in capsys.readouterr().out                     # printed last, as the other tables


@pytest.mark.parametrize("extra, message", [
    (["--whole-run-levels", "7"], "--whole-run-levels: got 7; allowed: refinement levels in [0, 6]"),
    (["--whole-run-cases", "lid_driven_cavity"], "--whole-run-cases: a lbm case, not a FEM one"),
    (["--whole-run-cases", "no_such_case"], "--whole-run-cases: got 'no_such_case'; allowed: a shipped FEM case"),
    (["--whole-run-repeats", "0"], "--whole-run-repeats: got 0"),
    (["--no-whole-run", "--whole-run-levels", "1"], "--whole-run-levels: --no-whole-run skips"),
])
def test_whole_run_options_are_checked_before_anything_runs(tmp_path, capsys, extra, message):
    out = tmp_path / "b"
    assert cli.main(["bench", "fem", "--backends", "numpy", "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"hpcsolve: error: {message}"), err
    assert not out.exists()


def test_sizes_refine_the_cases_mesh_and_case_files_are_accepted():
    shipped = wr.cases_folder()
    (heat, poisson) = wr.check_cases([str(shipped / "heat_plate_with_hole.toml"), "poisson_manufactured"])
    assert wr.size_override(heat, 0) == ("mesh.refine=1",) and wr.size_override(heat, 2) == ("mesh.refine=3",)
    assert wr.size_override(poisson, 2) == ("mesh.nx=256",)
    assert wr.size_override(poisson.with_overrides("mesh.ny=32"), 1) == ("mesh.nx=128", "mesh.ny=64")
    entry = wr.plan([poisson], (1,))[0]
    assert (entry["size"], entry["run_case"].mesh.nx) == ("mesh.nx=128", 128)
