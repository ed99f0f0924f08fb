"""Bad input to ``hpcsolve bench`` and ``hpcsolve compare``: exit 2 with one line naming the option, the value and
what is allowed, before anything is created or timed; nothing already in the output folder is lost."""

import json
from pathlib import Path

import pytest

from hpcsolve import cli

CASES = Path(__file__).resolve().parents[2] / "cases"
POISSON = CASES / "poisson_manufactured.toml"


def _refused(capsys, argv, *names):
    """cli.main(argv) exits 2 with one line on stderr naming every one of ``names``, no traceback."""
    rc = cli.main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for name in names:
        assert name in err, err
    return err


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.chdir(tmp_path)


# --- --out ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["lbm", "fem"])
def test_bench_out_that_is_a_file_is_refused_and_kept(capsys, tmp_path, family):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    _refused(capsys, ["bench", family, "--quick", "--backends", "numpy", "--out", str(afile)],
             "--out", "afile", "not a folder")
    assert afile.read_text() == "keep me"
    _refused(capsys, ["bench", family, "--quick", "--out", str(afile / "sub")], "--out", "afile")


def test_bench_out_from_the_environment_that_is_a_file_names_it(capsys, tmp_path, monkeypatch):
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("OUT", str(tmp_path / "afile"))
    _refused(capsys, ["bench", "lbm", "--quick", "--backends", "numpy"], "$OUT", "afile")


def test_bench_empty_out_is_refused_not_the_working_directory(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        cli.main(["bench", "lbm", "--quick", "--backends", "numpy", "--out", ""])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--out" in err and "empty" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_bench_unwritable_out_is_refused_and_its_files_kept(capsys, tmp_path, monkeypatch):
    import tempfile

    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "bench_lbm.json").write_text("earlier")

    def denied(*a, **k):      # as in a folder this user cannot write (the tests may run as root)
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", denied)
    for family in ("lbm", "fem"):
        _refused(capsys, ["bench", family, "--quick", "--backends", "numpy", "--out", str(folder)],
                 "--out", str(folder), "Permission denied")
    assert (folder / "bench_lbm.json").read_text() == "earlier"
    assert [p.name for p in folder.iterdir()] == ["bench_lbm.json"]


# --- --sizes, --mg-sizes ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", ["0", "-5", "1", "2", "131073"])
def test_bench_lbm_sizes_out_of_range(capsys, tmp_path, size):
    _refused(capsys, ["bench", "lbm", "--quick", "--backends", "numpy", "--out", str(tmp_path / "o"),
                      "--sizes", "64", size], "--sizes", f"got {size}", "[3, 131072]")
    assert not (tmp_path / "o").exists()          # refused before anything is created


@pytest.mark.parametrize("size", ["0", "-5", "1", "2", "4", "63", "16385"])
def test_bench_fem_sizes_out_of_range(capsys, tmp_path, size):
    _refused(capsys, ["bench", "fem", "--quick", "--backends", "numpy", "--out", str(tmp_path / "o"),
                      "--sizes", size], "--sizes", f"got {size}", "[64, 16384]")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("size", ["0", "-5", "2", "16384"])
def test_bench_fem_mg_sizes_out_of_range(capsys, size):
    _refused(capsys, ["bench", "fem", "--quick", "--mg-sizes", size], "--mg-sizes", f"got {size}", "[3, 16383]")


# --- --backends, --precisions ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["lbm", "fem"])
def test_bench_unknown_backend(capsys, family):
    _refused(capsys, ["bench", family, "--quick", "--backends", "numpy", "bogus"],
             "--backends", "'bogus'", "numpy, cupy, numba-cuda")


@pytest.mark.parametrize("value, shown", [("bogus", "allowed: fp64, fp32, fp16s, fp16c"),
                                          ("mixed", "does not apply to lbm")])
def test_bench_lbm_precision_not_of_the_family(capsys, value, shown):
    _refused(capsys, ["bench", "lbm", "--quick", "--backends", "numpy", "--precisions", value],
             "--precisions", repr(value), shown)


@pytest.mark.parametrize("value, shown", [("bogus", "allowed: fp64, fp32"), ("fp16s", "not a precision of the FEM"),
                                          ("mixed", "time-to-solution table")])
def test_bench_fem_precision_it_does_not_time(capsys, value, shown):
    _refused(capsys, ["bench", "fem", "--quick", "--sizes", "64", "--precisions", "fp64", value],
             "--precisions", repr(value), shown)


# --- valid minimal invocations still run ---------------------------------------------------------------------------

def test_bench_lbm_on_the_cpu_still_runs_and_keeps_other_files(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert cli.main(["bench", "lbm", "--quick", "--backends", "numpy", "--sizes", "3", "--precisions", "FP32",
                     "--out", str(out)]) == 0
    data = json.loads((out / "bench_lbm.json").read_text())
    assert [r["precision"] for r in data["cpu_reference"]] == ["fp32"]      # the name, normalised
    assert (out / "notes.txt").read_text() == "mine" and (out / "bench_lbm.md").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]         # no probe or temporary file left


def test_bench_fem_honours_its_precisions(tmp_path):
    out = tmp_path / "o"
    assert cli.main(["bench", "fem", "--quick", "--backends", "numpy", "--sizes", "64", "--precisions", "FP32",
                     "--no-multigrid", "--out", str(out)]) == 0
    data = json.loads((out / "bench_fem.json").read_text())
    assert data["sizes"] == [64] and {r["precision"] for r in data["rows"]} == {"fp32"}


# --- compare ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["1000000000000", "1001", "0", "-3"])
def test_compare_repeats_bounded(capsys, value):
    _refused(capsys, ["compare", str(POISSON), "--backends", "numpy", "--repeats", value],
             "--repeats", f"got {value}", "[1, 1000]")


def test_compare_repeats_at_the_bound_is_accepted(monkeypatch):
    from hpcsolve import run as runmod
    from hpcsolve.report.compare import compare
    from hpcsolve.report.compare_inputs import REPEATS_LIMIT

    class Reached(BaseException):
        pass

    def plan(*a, **k):
        raise Reached

    monkeypatch.setattr(runmod, "plan", plan)
    with pytest.raises(Reached):       # past validation, at the first configuration
        compare(POISSON, ["numpy"], ["fp64"], repeats=REPEATS_LIMIT, overrides=["mesh.nx=12"])


def test_compare_out_that_is_a_file_is_refused_before_any_run(capsys, tmp_path, monkeypatch):
    from hpcsolve import run as runmod

    def plan(*a, **k):
        raise AssertionError("a run started")

    monkeypatch.setattr(runmod, "plan", plan)
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    _refused(capsys, ["compare", str(POISSON), "--backends", "numpy", "--out", str(afile)], "--out", "afile")
    assert afile.read_text() == "keep me"


def test_compare_with_only_unusable_backends_is_refused(monkeypatch, capsys):
    """--backends naming only backends that cannot run here would compare the reference with itself: exit 2
    naming them and why; one usable among them is enough to run (the others are listed as skipped)."""
    from types import SimpleNamespace

    from hpcsolve.core import backends as backends_mod

    real = backends_mod.probe
    monkeypatch.setattr(backends_mod, "probe", lambda b: SimpleNamespace(available=False, simulator=False,
                                                                          reason="no device here")
                        if str(b) in ("cupy", "numba-cuda") else real(b))
    case = str(Path(__file__).parents[2] / "cases" / "poisson_manufactured.toml")
    assert cli.main(["compare", case, "--backends", "cupy", "numba-cuda", "--set", "mesh.nx=4", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "--backends: none of them can run here (cupy: no device here; numba-cuda: no device here)" in err


def test_compare_into_a_folder_holding_a_comparison_needs_overwrite(capsys, tmp_path):
    """A second comparison into the same --out replaced the first one's files without being asked: now exit 2
    naming --out before any run, the first comparison intact; --overwrite replaces it."""
    out = tmp_path / "cmp"
    args = ["compare", str(POISSON), "--backends", "numpy", "--precisions", "fp64", "fp32", "--set", "mesh.nx=4",
            "--quiet", "--no-warmup", "--repeats", "1", "--out", str(out)]
    assert cli.main(args) == 0
    capsys.readouterr()
    first = (out / "comparison.json").read_bytes()
    runs = json.loads(first)["runs"]
    assert {(r["backend"], r["precision"]) for r in runs} == {("numpy", "fp64"), ("numpy", "fp32")}
    run_result = out / "numpy-fp32" / "result.h5"
    stamp = run_result.stat().st_mtime_ns
    err = _refused(capsys, args, "--out", "already holds a comparison", "comparison.json", "--overwrite")
    assert "numpy-fp32/" in err
    assert (out / "comparison.json").read_bytes() == first and run_result.stat().st_mtime_ns == stamp
    # only a run folder left (the comparison files removed by hand): still a comparison's, still refused
    (out / "comparison.json").unlink()
    (out / "comparison.md").unlink()
    _refused(capsys, args, "--out", "numpy-fp32/")
    assert cli.main(args + ["--overwrite"]) == 0
    assert json.loads((out / "comparison.json").read_text())["runs"][0]["backend"] == "numpy"
    assert run_result.stat().st_mtime_ns != stamp


def test_compare_overwrite_stopped_part_way_leaves_no_stale_comparison(capsys, tmp_path, monkeypatch):
    """An --overwrite comparison that stops after replacing one run folder must not leave the earlier
    comparison.json / .md describing runs that are no longer there (a killed one used to): they go before the
    first run; a stopped comparison writes its own, marked interrupted, without plots."""
    from hpcsolve import run as cmp      # compare imports run_case from here when it runs

    out = tmp_path / "cmp"
    args = ["compare", str(POISSON), "--backends", "numpy", "--precisions", "fp64", "fp32", "--set", "mesh.nx=4",
            "--quiet", "--no-warmup", "--repeats", "1", "--out", str(out)]
    assert cli.main(args) == 0
    first_ids = {r: json.loads((out / r / "summary.json").read_text())["run_id"] for r in ("numpy-fp64", "numpy-fp32")}
    first = (out / "comparison.json").read_bytes()
    # refused before its first run (a mesh beyond this machine): the earlier comparison stays whole
    assert cli.main([a if a != "mesh.nx=4" else "mesh.nx=20000" for a in args] + ["--overwrite"]) == 2
    assert (out / "comparison.json").read_bytes() == first and (out / "plots" / "pareto.png").is_file()
    real, calls = cmp.run_case, []

    def stop_at_second_written_run(*a, **kw):
        if kw.get("out") is not None:
            calls.append(kw["out"])
            if len(calls) == 2:
                raise KeyboardInterrupt("stopped")
        return real(*a, **kw)

    monkeypatch.setattr(cmp, "run_case", stop_at_second_written_run)
    assert cli.main(args + ["--overwrite"]) == 130      # as after Ctrl-C
    # the earlier comparison is gone; the one written is this one's, marked interrupted (issue 37 item 3)
    stopped = json.loads((out / "comparison.json").read_text())
    assert stopped["status"] == "interrupted" and (out / "comparison.md").is_file()
    assert [(r["backend"], r["precision"], r["status"]) for r in stopped["runs"]][-1][:2] == ("numpy", "fp32")
    assert stopped["runs"][-1]["status"] == "interrupted"
    assert not (out / "plots" / "pareto.png").exists()
    assert json.loads((out / "numpy-fp64" / "summary.json").read_text())["run_id"] != first_ids["numpy-fp64"]
    monkeypatch.setattr(cmp, "run_case", real)
    assert cli.main(args + ["--overwrite"]) == 0
    assert {(r["backend"], r["precision"]) for r in json.loads((out / "comparison.json").read_text())["runs"]} \
        == {("numpy", "fp64"), ("numpy", "fp32")}


def test_compare_refused_input_leaves_no_default_folder(capsys, tmp_path):
    """Without --out the default folder is created when chosen (two comparisons started in the same second get
    two); input refused afterwards removes it again, so a refused command leaves nothing behind."""
    _refused(capsys, ["compare", str(POISSON), "--backends", "numpy", "--precisions", "fp16s"], "--precisions",
             "fp16s")
    assert not (tmp_path / "results").exists()


def test_compare_into_a_folder_of_plain_runs_is_not_refused(capsys, tmp_path):
    """Only a comparison's own files count: a folder holding ordinary run folders (results/) takes a comparison."""
    runs = tmp_path / "results"
    assert cli.main(["run", str(POISSON), "--backend", "numpy", "--quiet", "--no-plots", "--set", "mesh.nx=4",
                     "--out", str(runs / "poisson-numpy-fp64-x")]) == 0
    assert cli.main(["compare", str(POISSON), "--backends", "numpy", "--precisions", "fp64", "--set", "mesh.nx=4",
                     "--quiet", "--no-warmup", "--repeats", "1", "--out", str(runs)]) == 0
    assert (runs / "comparison.json").exists() and (runs / "poisson-numpy-fp64-x" / "result.h5").exists()


def test_compare_does_not_replace_a_run_folder_holding_checkpoints(capsys, tmp_path):
    """A run folder of a comparison's name with the checkpoints of an unfinished run counts as a comparison's: the
    comparison (which replaces its run folders) is refused without --overwrite and the checkpoints stay."""
    cavity = CASES / "lid_driven_cavity.toml"
    out = tmp_path / "cmp"
    tiny = ["--set", "lattice.resolution=8", "--set", "time.steps=40", "--set", "time.checkpoint_interval=10",
            "--set", "steady.enabled=false"]
    assert cli.main(["run", str(cavity), "--backend", "numpy", "--precision", "fp32", "--quiet", "--no-plots",
                     "--out", str(out / "numpy-fp32"), *tiny]) == 0
    for name in ("manifest.json", "summary.json", "result.h5", "result.xdmf"):
        (out / "numpy-fp32" / name).unlink()          # as an interrupted run leaves it: checkpoints only
    before = sorted(p.name for p in (out / "numpy-fp32" / "checkpoints").iterdir())
    _refused(capsys, ["compare", str(cavity), "--backends", "numpy", "--precisions", "fp32", "--quiet", "--no-warmup",
                      "--repeats", "1", "--out", str(out), *tiny], "--out", "numpy-fp32/")
    assert sorted(p.name for p in (out / "numpy-fp32" / "checkpoints").iterdir()) == before


def test_a_refused_comparison_leaves_no_run_folder_behind(capsys, tmp_path):
    """Refused in its first run (after that run claimed its folder): the default folder and the run folder go."""
    _refused(capsys, ["compare", str(POISSON), "--backends", "numpy", "--precisions", "fp32", "--no-warmup",
                      "--quiet", "--set", "mesh.nx=4", "--set", "problem.conductivity=1e308"], "problem.conductivity")
    assert not (tmp_path / "results").exists()
