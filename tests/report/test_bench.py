"""hpcsolve bench on the CPU: the NumPy rows, their spread, where the files go, which sizes ran."""

import json

from hpcsolve import cli


def test_bench_lbm_on_the_cpu_reports_spread_and_the_sizes_it_ran(tmp_path, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "lbm", "--quick", "--backends", "numpy"]) == 0
    data = json.loads((tmp_path / "results" / "bench" / "bench_lbm.json").read_text())
    assert not (tmp_path / "bench").exists()
    assert data["sizes"] == [64]                       # the CPU reference size, not the requested GPU sizes
    for row in data["cpu_reference"]:
        lo, hi = row["seconds_spread"]
        assert 0 < lo <= row["seconds_per_step"] <= hi and row["mlups"] > 0 and row["cpu_threads"] == 1
    md = (tmp_path / "results" / "bench" / "bench_lbm.md").read_text()
    assert "MLUPS (min-max)" in md and "numpy (CPU, 1 thread)" in md


def test_bench_lbm_without_a_gpu_times_the_numpy_reference_at_the_sizes_asked(tmp_path, monkeypatch):
    """--sizes without a GPU backend to time used to be ignored (the reference ran at its baseline size)."""
    monkeypatch.delenv("OUT", raising=False)
    assert cli.main(["bench", "lbm", "--quick", "--backends", "numpy", "--sizes", "16", "24",
                     "--precisions", "fp32", "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "bench_lbm.json").read_text())
    assert data["sizes"] == [16, 24] and [r["size"] for r in data["cpu_reference"]] == [16, 24]
    assert all(r["cells"] == r["size"] ** 2 and r["mlups"] > 0 for r in data["cpu_reference"])


def test_bench_lbm_size_beyond_host_memory_is_refused_before_timing(tmp_path, capsys):
    out = tmp_path / "b"
    assert cli.main(["bench", "lbm", "--backends", "numpy", "--sizes", "60000", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hpcsolve: error: --sizes: ") and "for the NumPy reference here" in err, err
    assert not out.exists()


def test_bench_fem_runs_on_the_cpu_with_the_numpy_backend(tmp_path, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "fem", "--quick", "--sizes", "64", "--backends", "numpy"]) == 0
    data = json.loads((tmp_path / "results" / "bench" / "bench_fem.json").read_text())
    assert data["sizes"] == [64] and data["device"].startswith("CPU")
    fused = [r for r in data["rows"] if r["variant"].startswith("fused")]
    assert {r["precision"] for r in fused} == {"fp64", "fp32"}
    for r in fused:
        assert 0 < r["ms_min"] <= r["ms_per_iteration"] <= r["ms_max"]
    solves = {(s["precision"], s["method"]): s for s in data["solve"]}
    assert solves["fp64", "cg"]["converged"] and solves["fp64", "cg"]["true_residual"] <= 1e-10
    assert solves["mixed", "cg-reliable"]["true_residual"] <= 1e-10          # mixed reaches fp64 accuracy
    assert not solves["fp32", "cg"]["converged"] and solves["fp32", "cg"]["true_residual"] > 1e-8
    # the whole-run table is on by default: --quick runs each shipped FEM case once at its own mesh size
    assert sorted(r["case"] for r in data["whole_run"]) == ["cook_membrane", "heat_plate_with_hole",
                                                            "poisson3d_manufactured", "poisson_manufactured",
                                                            "poisson_p2", "thick_cylinder"]
    assert {(r["level"], r["backend"], r["repeats"]) for r in data["whole_run"]} == {(0, "numpy", 1)}
