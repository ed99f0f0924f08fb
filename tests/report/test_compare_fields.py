"""What a new user trips over in ``compare``: the verdict names the field its error is in and the table lists every
field, ``fields`` chooses what counts; the solver state's memory changes with precision; round-off does not decide
the recommendation (accuracy classes, then time); progress lines at least every 10 s."""

import json
from pathlib import Path

import pytest

from hpcsolve import cli
from hpcsolve.core.errors import CaseError
from hpcsolve.report import compare as cmp
from hpcsolve.report.compare import compare
from hpcsolve.report.comparison import Comparison, Run, accuracy_bin

CASES = Path(__file__).parents[2] / "cases"
SMALL_CAVITY = ["lattice.resolution=16", "time.end_time=2", "time.output_interval=0.5", "steady.enabled=false"]


@pytest.fixture(scope="module")
def cavity():
    """fp16s on the small cavity: pressure error ~6e-3, velocity ~3e-4 (the issue's numbers, smaller grid)."""
    return compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], precisions=["fp32", "fp16s"], repeats=1,
                   warmup=False, overrides=SMALL_CAVITY)


def test_the_verdict_names_the_field_and_the_table_lists_every_field(cavity):
    fp16 = next(r for r in cavity.runs if r.precision == "fp16s")
    assert fp16.error_field == "pressure" and fp16.error > 1e-3 > fp16.field_errors["velocity"]["rel_l2"]
    verdict = cavity.verdicts()["numpy/fp16s"]
    assert verdict.startswith(f"field error {fp16.error:.3g} in pressure above the tolerance 0.001 (velocity ")
    table = cavity.table(wide=True)      # issue 50: every field's error is in the wide table
    assert f"{fp16.error:.2e} (pressure)" in table
    assert f"velocity {fp16.field_errors['velocity']['rel_l2']:.2e}, pressure {fp16.error:.2e}" in table
    assert "largest over fields (density_lattice, pressure, velocity, vorticity)" in table
    assert fp16.drift["field"] == "velocity"


def test_fields_selects_what_counts():
    comp = compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], precisions=["fp16s"], repeats=1,
                   warmup=False, overrides=SMALL_CAVITY, fields=["velocity"])
    fp16 = comp.runs[1]
    assert fp16.error == fp16.field_errors["velocity"]["rel_l2"] < 1e-3 < fp16.field_errors["pressure"]["rel_l2"]
    assert comp.acceptable(fp16) and not comp.verdicts()["numpy/fp16s"].startswith("field error")
    data = json.loads(json.dumps(comp.to_dict()))     # what comparison.json holds
    assert data["fields"] == ["velocity"] and data["runs"][1]["error_field"] == "velocity"
    assert "relative L2 error vs the CPU fp64 run, velocity" in data["error_definition"]


def test_a_metric_can_be_judged_and_an_unknown_name_is_refused():
    comp = compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], precisions=["fp16s"], repeats=1,
                   warmup=False, overrides=SMALL_CAVITY, fields=["ghia_max_abs_diff"])
    run, ref = comp.runs[1], comp.runs[0]
    a, b = run.result.metrics["ghia_max_abs_diff"], ref.result.metrics["ghia_max_abs_diff"]
    assert run.error_field == "ghia_max_abs_diff" and run.error == abs(a - b) / abs(b) > 0
    assert set(run.judged_errors) == {"ghia_max_abs_diff"} and "pressure" in run.field_errors   # shown, not judged
    with pytest.raises(CaseError, match="--fields.*no (field or scalar metric|LBM run reports a field or metric)") as exc:
        compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], precisions=["fp32"], repeats=1, warmup=False,
                overrides=SMALL_CAVITY, fields=["velocty"])
    assert "velocity" in str(exc.value)
    with pytest.raises(CaseError, match="each name once"):
        compare(CASES / "lid_driven_cavity.toml", fields=["velocity", "velocity"])


def test_lbm_state_memory_follows_the_precision(cavity):
    d = cavity.runs[0].result.derived
    cells = d["nx"] * d["ny"]
    state = {r.precision: r.state_bytes for r in cavity.runs}
    assert state == {"fp64": 2 * 9 * cells * 8, "fp32": 2 * 9 * cells * 4, "fp16s": 2 * 9 * cells * 2}
    assert len({r.memory_bytes for r in cavity.runs}) == 1        # the process peak estimate: the same for all
    assert f"{state['fp16s'] / 2**20:.3g}" in cavity.table(wide=True) and "state_MiB" in cavity.table(wide=True)


def test_fem_state_memory_counts_matrix_vectors_and_hierarchy():
    comp = compare(CASES / "poisson_manufactured.toml", backends=["numpy"], precisions=["fp32"], repeats=1,
                   warmup=False, overrides=["mesh.nx=16"], preconditioners=["none", "mg"])
    runs = {r.label: r for r in comp.runs}
    d = runs["numpy/fp64/none"].result.derived
    rows, nnz = d["free_unknowns"], d["matrix_nnz"]
    assert runs["numpy/fp64/none"].state_bytes == nnz * 12 + (rows + 1) * 4 + 10 * rows * 8
    assert runs["numpy/fp32/none"].state_bytes == nnz * 8 + (rows + 1) * 4 + 10 * rows * 4
    mg = runs["numpy/fp64/mg"]
    assert mg.state_bytes > runs["numpy/fp64/none"].state_bytes and "hierarchy" in mg.state_basis
    assert len(mg.setup_times) == 1 and mg.setup_times[0] > 0 and "pc_setup_s" in comp.table(wide=True)


def _synthetic(spec, tol=1e-3):
    runs = []
    for label, (times, err) in spec.items():
        b, p, pc = label.split("/")
        r = Run(b, p, status="converged", preconditioner=pc, wall_s=sorted(times)[len(times) // 2], times=list(times),
                reference_run=label == "numpy/fp64/none")
        r.field_errors = {"u": {"rel_l2": err, "rel_max": err}}
        runs.append(r)
    return Comparison("cook", "fem", tol, runs)


def test_round_off_does_not_decide_the_recommendation():
    """The issue's Cook compare: amg 4.1e-13 against mg 7.0e-13, mg's median 0.206 s against 0.281 s (spreads
    overlapping): mg, as both are far below the tolerance."""
    comp = _synthetic({"numpy/fp64/none": ([1.0, 1.0, 1.0], 0.0), "cupy/fp64/mg": ([0.19, 0.206, 0.30], 7.0e-13),
                       "cupy/fp64/amg": ([0.25, 0.281, 0.29], 4.1e-13)})
    assert accuracy_bin(7.0e-13, 1e-3) == accuracy_bin(4.1e-13, 1e-3) == 0.0
    assert (accuracy_bin(1e-5, 1e-3), accuracy_bin(1.1e-5, 1e-3), accuracy_bin(1e-3, 1e-3)) == (0.0, 1.0, 2.0)
    rec = comp.recommendation()
    assert rec["label"] == "cupy/fp64/mg" and rec["why"].startswith("as accurate as cupy/fp64/amg")
    assert comp.verdicts()["cupy/fp64/amg"].startswith("as accurate as cupy/fp64/mg (same accuracy class), but slower")
    assert "accuracy_class: 0 for errors at or below tolerance/100 (1e-05)" in comp.table(wide=True)


def test_progress_lines_at_least_every_ten_seconds():
    now, lines = [0.0], []
    rep = cmp._Progress(True, 2, write=lines.append, clock=lambda: now[0])
    rep.start(0, "numpy/fp64")
    rep.phase("warm-up run (untimed)")
    now[0] = 9.9
    assert not rep.tick()
    now[0] = 10.0
    assert rep.tick() and lines[-1] == "compare: numpy/fp64: still running (warm-up run (untimed)), 10 s so far"
    now[0] = 15.0
    assert not rep.tick()               # 5 s since the last line
    rep.timed(1, 0.25)
    assert lines[-1] == "compare: numpy/fp64: timed run 1: 0.25 s" and len(lines) == 4
    quiet = cmp._Progress(False, 2, write=lines.append, clock=lambda: 100.0)
    quiet.start(0, "numpy/fp64")
    assert not quiet.tick() and len(lines) == 4


def test_compare_prints_a_line_per_configuration_and_timed_run(capsys):
    comp = compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], precisions=["fp32"], repeats=2, warmup=False,
                   overrides=SMALL_CAVITY, progress=True)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("compare: ")]
    # where each configuration's wall time went: the plan, then each timed run whole, which holds its solver time
    for run in comp.runs:
        assert set(run.phases_s) == {"plan", "runs"} and len(run.phases_s["runs"]) == len(run.times) == 2
        assert all(whole >= t for whole, t in zip(run.phases_s["runs"], run.times))
    assert sum(", timed runs " in line and "; plan " in line for line in err) == 2
    assert any(line.startswith("compare: predicted total: ") and "these estimates took" in line for line in err)
    # the plan first (reference, cross-check, predicted times: issue 34), then the configurations in turn
    assert err[0].startswith("compare: reference numpy/fp64") and any("predicted numpy/fp32" in x for x in err)
    assert [x for x in err if x.endswith(": started")][0] == "compare: [1/2] numpy/fp64: started"
    assert sum("timed run 2:" in line for line in err) == 2 and sum(": done in " in line for line in err) == 2


def test_the_case_names_what_compare_judges_and_the_option_overrides_it(capsys):
    """``[compare] fields`` in the case is the default of ``--fields``: the case's choice (velocity) judges the
    fp16s run on its velocity error; ``fields=`` given explicitly wins over the case."""
    over = SMALL_CAVITY + ['compare.fields=["velocity"]']
    comp = compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], precisions=["fp16s"], repeats=1,
                   warmup=False, overrides=over)
    assert comp.runs[1].error_field == "velocity" and comp.acceptable(comp.runs[1])
    comp = compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], precisions=["fp16s"], repeats=1,
                   warmup=False, overrides=over, fields=["pressure"])
    assert comp.runs[1].error_field == "pressure" and not comp.acceptable(comp.runs[1])


def test_the_fields_option_of_the_cli_reaches_compare(tmp_path, capsys):
    """``hpcsolve compare --fields velocity`` judges the velocity error (comparison.json says so)."""
    args = ["compare", str(CASES / "lid_driven_cavity.toml"), "--backends", "numpy", "--precisions", "fp16s",
            "--repeats", "1", "--no-warmup", "--quiet", "--fields", "velocity", "--out", str(tmp_path / "c")]
    for s in SMALL_CAVITY:
        args += ["--set", s]
    assert cli.main(args) == 0
    data = json.loads((tmp_path / "c" / "comparison.json").read_text())
    assert data["fields"] == ["velocity"] and data["runs"][1]["error_field"] == "velocity"


def test_the_pareto_plot_marks_the_recommended_run_and_keeps_eleven_labels_apart(tmp_path, monkeypatch):
    """Eleven configurations: the recommended one (computed by the comparison) carries a 'recommended' marker in
    the legend and a bold label; neighbouring labels (sorted by error) get different offsets."""
    from hpcsolve.report import comparison as cmp

    spec = {"numpy/fp64/none": ((0.30, 0.31, 0.32), 1e-14)}
    for i, pc in enumerate(("jacobi", "mg", "amg")):
        for j, prec in enumerate(("fp64", "fp32", "mixed")):
            spec[f"numpy/{prec}/{pc}"] = ((0.1 + 0.01 * i + 0.001 * j,) * 3, 10.0 ** (-12 + 3 * j) * (1 + i))
    spec["numpy/fp32/none"] = ((0.05, 0.051, 0.052), 2e-6)
    spec["numpy/fp64/amg"] = ((0.2, 0.2, 0.2), 3e-13)
    comp = _synthetic(spec)
    assert len(comp.runs) == 11
    seen = {}

    def keep(fig, ax, path, *args, **kwargs):
        seen["ax"] = ax
        return path

    monkeypatch.setattr(cmp, "_finish", keep)
    comp.plot_pareto(tmp_path / "p.png")
    ax, best = seen["ax"], comp.recommendation()["label"]
    assert best is not None
    assert any(line.get_label() == f"recommended: {best}" for line in ax.get_lines())
    # issue 50: points carry numbers placed clear of each other (tests/report/test_plot_layout.py checks the overlaps), the
    # configurations are named in a key beside the axes, the recommended one starred there and its number bold
    texts = [t for t in ax.texts]
    bold = [t.get_text() for t in texts if t.get_fontweight() == "bold"]
    shown = sorted((r for r in comp.runs if not r.is_reference), key=lambda r: (r.error, r.wall_s))
    number = str(1 + [r.label for r in shown].index(best))
    assert len(bold) == 1 and bold[0] == number
    key = next(t.get_text() for a in ax.figure.axes if a is not ax for t in a.texts)
    assert f"*{number:>2}  {best}" in key.replace("\n     ", "")
    renderer = ax.figure.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in texts]
    assert len(boxes) == 10 and not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
    ax.figure.clf()


def test_a_run_the_16bit_guard_flagged_says_so_in_its_verdict():
    """The guard's flag (result.metrics['precision_guard_flagged_step'], set by a real fp16s run of Poiseuille, which
    the guard flags on the CPU: docs/design/lbm_algorithm.md) reaches the run's compare verdict; an unflagged run's does not."""
    from hpcsolve.run import run_case

    res = run_case(CASES / "poiseuille.toml", "numpy", "fp16s", progress=False, plots=False)
    step = res.metrics["precision_guard_flagged_step"]
    comp = _synthetic({"numpy/fp64/none": ((0.3, 0.3, 0.3), 1e-14), "numpy/fp16s/none": ((0.1, 0.1, 0.1), 5e-2),
                       "numpy/fp32/none": ((0.2, 0.2, 0.2), 1e-6)})
    flagged = next(r for r in comp.runs if r.precision == "fp16s")
    flagged.result = res
    verdicts = comp.verdicts()
    assert f"the 16-bit guard flagged it at step {step}" in verdicts["numpy/fp16s/none"]
    assert "guard" not in verdicts["numpy/fp32/none"]
