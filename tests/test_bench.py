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
