"""Reliability III (issue 37), items 1, 2, 3, 10 and 13: a comparison against an unconverged reference, two commands
into one folder and repeated names, signals during a comparison, ``bench lbm`` with a precision nobody here runs, and a
folder named ``manifest.json`` in a result folder."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from hpcsolve import cli
from hpcsolve.core import outdir

CASES = Path(__file__).parents[2] / "cases"
POISSON = CASES / "poisson_manufactured.toml"
CAVITY = CASES / "lid_driven_cavity.toml"
FAST = ["--quiet", "--no-warmup", "--repeats", "1"]


def _compare(out, *args) -> int:
    return cli.main(["compare", str(POISSON), "--backends", "numpy", "--set", "mesh.nx=8", *FAST, "--out", str(out),
                     *args])


def _one_error_line(err: str, *names) -> None:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("hpcsolve:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for name in names:
        assert name in lines[0], lines[0]


# --- item 1: a reference that did not finish well ---------------------------------------------------------------------

def test_an_unconverged_reference_fails_the_comparison_and_judges_nobody(tmp_path, capsys):
    """The reference (jacobi, 3 iterations) ends not_converged: every other run used to be measured against it
    (the converged amg run rejected for its 'field error'); now nobody is judged, it says so, exit 3."""
    out = tmp_path / "cmp"
    code = _compare(out, "--precisions", "fp64", "--preconditioners", "jacobi", "amg", "--set", "solve.maxiter=3",
                    "--tolerance", "1e-5")
    captured = capsys.readouterr()
    assert code == 3, captured.err
    data = json.loads((out / "comparison.json").read_text())
    runs = {r["label"]: r for r in data["runs"]}
    # issue 50: a solve that missed rtol but is accurate to its discretisation ends accurate_to_discretisation (FEM
    # runner); as the reference it still did not finish (the rtol asked for), so the comparison fails as before
    ended = runs["numpy/fp64/jacobi"]["status"]
    assert ended in ("not_converged", "accurate_to_discretisation")
    _one_error_line(captured.err, "failed reference", "numpy/fp64/jacobi", ended)
    assert f"**Failed reference**: the reference numpy/fp64/jacobi ended {ended}" in captured.out
    assert data["status"] == "reference_failed" and f"numpy/fp64/jacobi ended {ended}" in data["reference_failed"]
    assert data["recommendation"]["label"] is None and "failed reference" in data["recommendation"]["why"]
    assert runs["numpy/fp64/jacobi"]["reference"]
    assert runs["numpy/fp64/amg"]["status"] == "converged"
    for r in runs.values():                      # no error against the failed reference, and the reason why
        assert r["error"] is None and r["field_errors"] == {} and r["error_note"], r
    assert runs["numpy/fp64/amg"]["error_note"].startswith("not judged: the reference numpy/fp64/jacobi")
    assert data["verdicts"]["numpy/fp64/jacobi"].startswith(f"failed reference: it ended {ended}")
    assert data["verdicts"]["numpy/fp64/amg"].startswith("not judged")
    assert "above the tolerance" not in (out / "comparison.md").read_text()


# --- item 2: one folder, one command; names once ----------------------------------------------------------------------

def test_a_comparison_into_a_folder_another_command_holds_is_refused(tmp_path, capsys):
    """Two comparisons into one --out started close together both passed the check before either wrote, and one
    comparison was lost: a comparison now takes the folder's lock as a run does; the second is refused naming it."""
    out = tmp_path / "cmp"
    with outdir.claim(out, comparison=True):     # the first comparison, still running
        code = _compare(out, "--precisions", "fp64")
        err = capsys.readouterr().err
        assert code == 2, err
        _one_error_line(err, "--out", "another hpcsolve run is writing into it", f"pid {os.getpid()}")
        assert not (out / "comparison.json").exists() and not (out / "numpy-fp64").exists()


def test_a_run_and_a_comparison_never_share_a_folder(tmp_path, capsys):
    cmp_out, run_out = tmp_path / "cmp", tmp_path / "run"
    assert _compare(cmp_out, "--precisions", "fp64") == 0
    capsys.readouterr()
    before = (cmp_out / "comparison.json").read_bytes()
    for extra in ([], ["--overwrite"]):
        assert cli.main(["run", str(POISSON), "--backend", "numpy", "--set", "mesh.nx=8", "--quiet", "--no-plots",
                         "--out", str(cmp_out), *extra]) == 2
        _one_error_line(capsys.readouterr().err, "--out", "holds a comparison (comparison.json)")
    assert not (cmp_out / "result.h5").exists() and (cmp_out / "comparison.json").read_bytes() == before
    assert cli.main(["run", str(POISSON), "--backend", "numpy", "--set", "mesh.nx=8", "--quiet", "--no-plots",
                     "--out", str(run_out)]) == 0
    capsys.readouterr()
    for extra in ([], ["--overwrite"]):
        assert _compare(run_out, "--precisions", "fp64", *extra) == 2
        _one_error_line(capsys.readouterr().err, "--out", "holds the result or checkpoints of a run")
    assert not (run_out / "comparison.json").exists() and not (run_out / "numpy-fp64").exists()


@pytest.mark.parametrize("option, values, shown", [("--backends", ["numpy", "numpy"], "'numpy'"),
                                                   ("--precisions", ["fp32", "fp32"], "'fp32'"),
                                                   ("--preconditioners", ["jacobi", "JACOBI"], "'JACOBI'")])
def test_a_name_given_twice_is_refused(tmp_path, capsys, option, values, shown):
    """Duplicate names gave duplicate rows, the second run replacing the first's folder."""
    out = tmp_path / "cmp"
    args = ["compare", str(POISSON), *FAST, "--set", "mesh.nx=8", "--out", str(out)]
    for opt, default in (("--backends", ["numpy"]), ("--precisions", ["fp64"])):
        args += [opt, *(values if opt == option else default)]
    if option == "--preconditioners":
        args += [option, *values]
    assert cli.main(args) == 2
    _one_error_line(capsys.readouterr().err, option, shown, "more than once")
    assert not out.exists()


# --- item 3: a signal stops the comparison ----------------------------------------------------------------------------

def test_a_sigterm_inside_a_run_stops_the_comparison(tmp_path, capsys, monkeypatch):
    """SIGTERM during the second configuration's run (its first checkpoint): the run stops gracefully, and the
    comparison used to record it as a row and go on (exit 0). Now: exit 130, comparison.json says interrupted."""
    from hpcsolve.lbm import runner as lbm_runner

    out, sent = tmp_path / "cmp", []
    real_write = lbm_runner.write_checkpoint

    def write_checkpoint(folder, state):
        real_write(folder, state)
        if Path(folder).name == "numpy-fp32" and not sent:
            sent.append(folder)
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(lbm_runner, "write_checkpoint", write_checkpoint)
    code = cli.main(["compare", str(CAVITY), "--backends", "numpy", "--precisions", "fp32", "fp16s", *FAST,
                     "--out", str(out), "--set", "lattice.resolution=8", "--set", "time.steps=400",
                     "--set", "time.monitor_interval=20", "--set", "time.checkpoint_interval=40",
                     "--set", "steady.enabled=false"])
    err = capsys.readouterr().err
    assert sent and code == 130, err
    _one_error_line(err, "hpcsolve: interrupted:", "numpy/fp32 was interrupted", "comparison.json")
    data = json.loads((out / "comparison.json").read_text())
    assert data["status"] == "interrupted" and data["recommendation"]["label"] is None
    assert [(r["label"], r["status"]) for r in data["runs"]] == [("numpy/fp64", "completed"),
                                                                ("numpy/fp32", "interrupted")]
    assert not (out / "numpy-fp16s").exists()                       # the comparison did not go on
    summary = json.loads((out / "numpy-fp32" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "--resume" in summary["message"]
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]


def test_a_signal_between_runs_stops_the_comparison(tmp_path, capsys, monkeypatch):
    """A SIGTERM that arrives outside any run (here just before the second configuration starts) stops the
    comparison too, and the folder says so (it used to end with no comparison.json at all)."""
    from hpcsolve import run as runmod

    out, real, calls = tmp_path / "cmp", runmod.run_case, []

    def signal_before_the_second_written_run(*a, **kw):
        if kw.get("out") is not None:
            calls.append(kw["out"])
            if len(calls) == 2:
                os.kill(os.getpid(), signal.SIGTERM)
        return real(*a, **kw)

    monkeypatch.setattr(runmod, "run_case", signal_before_the_second_written_run)
    code = _compare(out, "--precisions", "fp64", "fp32")
    err = capsys.readouterr().err
    assert code == 130, err
    _one_error_line(err, "hpcsolve: interrupted:", "numpy/fp32 was interrupted")
    data = json.loads((out / "comparison.json").read_text())
    assert data["status"] == "interrupted"
    assert [(r["label"], r["status"]) for r in data["runs"]] == [("numpy/fp64", "converged"),
                                                                ("numpy/fp32", "interrupted")]
    assert "Interrupted" in (out / "comparison.md").read_text()


# --- item 13: a folder where hpcsolve writes a file -------------------------------------------------------------------

@pytest.mark.parametrize("extra", [[], ["--overwrite"]])
def test_a_folder_named_manifest_json_is_refused_up_front(tmp_path, capsys, extra):
    """``mkdir out/manifest.json``: --overwrite set it aside, then could not delete it (a .previous journal left, and
    every later run into the folder failed with 'Is a directory'). Now exit 2 naming the path, nothing moved."""
    out = tmp_path / "run"
    (out / "manifest.json").mkdir(parents=True)
    code = cli.main(["run", str(POISSON), "--backend", "numpy", "--set", "mesh.nx=8", "--quiet", "--no-plots",
                     "--out", str(out), *extra])
    err = capsys.readouterr().err
    assert code == 2, err
    _one_error_line(err, "--out", str(out / "manifest.json"), "is not a file")
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json"] and (out / "manifest.json").is_dir()


def test_a_journal_that_set_a_folder_aside_is_settled(tmp_path, capsys):
    """A folder left by the old code (a run's result, and a journal naming a hidden folder it could not delete) is
    settled by the next run: the journal and the hidden (empty) folder go, and the run succeeds."""
    out = tmp_path / "run"
    args = ["run", str(POISSON), "--backend", "numpy", "--set", "mesh.nx=8", "--quiet", "--no-plots", "--out", str(out)]
    assert cli.main(args) == 0
    tag = ".previous-0123456789ab"
    (out / f"{tag}-manifest.json").mkdir()
    (out / f"{tag}.journal").write_text(json.dumps({"state": "complete",
                                                    "files": [["manifest.json", f"{tag}-manifest.json"]]}))
    assert cli.main(args + ["--overwrite"]) == 0, capsys.readouterr().err
    assert not [p.name for p in out.iterdir() if p.name.startswith(".previous-")]
    assert (out / "manifest.json").is_file()
