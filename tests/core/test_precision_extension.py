"""A new precision is one ``Precision`` object and one ``register`` call (here both in this file): the benchmark's
NumPy and kernel-check rows, its markdown table and ``compare``'s rows take it without a KeyError, from the
policy's own attributes (issue 53: a precision touches <= 3 files)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hpcsolve.core import precision
from hpcsolve.core.precision import Precision
from hpcsolve.lbm.steppers.stepper import get_stepper
from hpcsolve.report import bench_lbm
from hpcsolve.report.compare import compare

CASES = Path(__file__).parents[2] / "cases"
SMALL_CAVITY = ["lattice.resolution=16", "time.end_time=2", "time.output_interval=0.5", "steady.enabled=false"]

#: float32 storage of the shifted populations, float64 arithmetic: a precision hpcsolve does not ship
WIDE = Precision("fp32w", np.dtype(np.float32), np.dtype(np.float64), frozenset({"lbm"}),
                 description="float32 storage, float64 arithmetic (a test precision)")


@pytest.fixture
def wide():
    precision.register(WIDE)
    try:
        yield WIDE
    finally:
        precision.POLICIES.pop(WIDE.name, None)


def test_register_checks_the_policy_and_its_name(wide):
    assert precision.get_precision("fp32w", "lbm") is wide and "fp32w" in precision.names("lbm")
    assert "fp32w" not in precision.names("fem")
    with pytest.raises(ValueError, match="already registered"):
        precision.register(wide)
    with pytest.raises(ValueError, match="lower-case word"):
        precision.register(Precision("Bad Name", np.dtype(np.float32), np.dtype(np.float32), frozenset({"lbm"})))
    # the kernel-check bound comes from the storage width where the policy does not set one
    assert wide.check_bound == precision.FP32.check_bound == 1e-4
    assert precision.FP16S.check_bound == precision.FP16C.check_bound == 5e-2 and precision.FP64.check_bound == 1e-10


def test_the_benchmark_rows_and_table_take_a_new_precision(wide, monkeypatch):
    # the kernel check, with the NumPy stepper standing in for a GPU one (one step kernel: no pair choice to pass on)
    monkeypatch.setattr(bench_lbm, "get_stepper", lambda backend, setup, pairs=None: get_stepper(backend, setup))
    (layout, pairs), = bench_lbm.check_kernels("fp32w", None)[:1]
    chk = bench_lbm.check_against_reference("numpy", "fp32w", n=16, steps=20, in_place=layout, pairs=pairs)
    # storage (float32) differs from the arithmetic (float64): checked against the fp64 reference, within its bound
    assert chk["against"] == "numpy-fp64" and bench_lbm._bound("fp32w") == 1e-4
    assert 1e-9 < chk["u_rel_l2"] < 1e-5 and chk["finite"], chk
    # the NumPy rows and the speed-up column (against NumPy fp64, the policies' REFERENCE)
    cpu = [bench_lbm.time_numpy(p, 16, steps=2, repeats=1) for p in ("fp64", "fp32w")]
    bench_lbm.speedups([], cpu)
    assert [r["precision"] for r in cpu] == ["fp64", "fp32w"] and all(r["mlups"] > 0 for r in cpu)
    assert cpu[0]["speedup_vs_numpy_fp64"] == 1.0 and cpu[1]["speedup_vs_numpy_fp64"] > 0
    data = {"device": "CPU", "copy_bandwidth_GBps": 10.0, "rows": [], "checks": {}, "cpu_reference": cpu,
            "memory": []}
    lines = bench_lbm._markdown(data).splitlines()
    (row,) = [line for line in lines if "| fp32w |" in line]
    assert row.startswith("| numpy (CPU, 1 thread) | fp32w | 16^2 |") and "not checked (CPU reference)" in row
    assert any("| fp64 |" in line and "baseline" in line for line in lines)


def test_compare_rows_measure_a_new_precision_against_fp64(wide):
    comp = compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], precisions=["fp64", "fp32w"],
                   tolerance=1e-3, overrides=SMALL_CAVITY, warmup=False)
    rows = {(r.backend, r.precision): r for r in comp.runs}
    assert set(rows) == {("numpy", "fp64"), ("numpy", "fp32w")}
    ref, new = rows["numpy", "fp64"], rows["numpy", "fp32w"]
    assert ref.is_reference and ref.error == 0.0
    # float32 storage rounds each stored population: a small, non-zero field error after a few hundred steps
    assert 0 < new.error < 1e-4, new.error
    assert new.throughput["mlups"] > 0 and new.state_bytes == 2 * 9 * 18 * 18 * 4   # 16 + 2 wall cells across, 4 B a value
    assert "| fp32w |" in comp.table(wide=True)
