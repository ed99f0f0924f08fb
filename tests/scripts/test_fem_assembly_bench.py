"""scripts/fem_assembly_bench.py: one tiny NumPy run writes its table and JSON, both paths agree in it, and its
bandwidth figures are the bytes model over the times it measured."""

import importlib.util
import json
from pathlib import Path

import pytest

from hpcsolve.fem.discrete import tet_assembly

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("fem_assembly_bench", ROOT / "scripts" / "fem_assembly_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_a_tiny_numpy_run(tmp_path, capsys):
    mod = _script()
    assert mod.main(["--backend", "numpy", "--sizes", "2", "3", "--warmup", "1", "--repeats", "2", "--per-cell",
                     "--copy-mib", "8", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert (tmp_path / "fem_assembly_bench.md").read_text() == printed
    assert [ln.split(" | ")[0] for ln in printed.splitlines() if ln.endswith("|") and "^3" in ln] == ["| 2^3", "| 3^3"]
    result = json.loads((tmp_path / "fem_assembly_bench.json").read_text())
    assert [r["size"] for r in result["rows"]] == [2, 3] and result["per_cell"]
    for r in result["rows"]:
        assert r["cells"] == 6 * r["size"] ** 3 and r["nodes"] == (r["size"] + 1) ** 3
        assert r["same_pattern"] and r["max_rel_diff"] < 1e-12
        assert r["bytes_moved"] == tet_assembly.bytes_moved(r["nodes"], r["cells"], r["nnz"], 4, True)
        assert r["numeric_GBps"] * 1e9 * r["numeric"]["median_s"] == pytest.approx(r["bytes_moved"])
        # timing-ok: the median of its own samples is at least their minimum (no bound on any time)
        assert r["numeric"]["repeats"] == 2 and r["numeric"]["min_s"] <= r["numeric"]["median_s"]
