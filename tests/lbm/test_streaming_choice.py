"""The GPU steppers' streaming and launch-shape choice (hpcsolve/lbm/steppers/gpu_common.py), on the CPU.

``lattice.streaming = "auto"`` (``LBMSetup.in_place`` None) streams in place where the one-array lattice takes
between 0.3 and 0.65 of the device's L2 cache (fp32 / fp64): there it stays in L2 from step to step (measured on
the H200 in docs/design/lbm_algorithm.md, "Automatic in-place streaming"). Rows of at most 256 cells take a backend's
short-row launch shape (Numba fp32: up to 256 threads per block, one block per row). 16-bit storage runs one cell
per thread on grids of at most a backend's ``PER_CELL_CELLS`` cells and the two-cells-per-thread pair kernel on
larger grids with an even nx (measured in docs/design/lbm_algorithm.md)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from lbm_gpu_cases import channel_with_bouzidi

from hpcsolve.cli import main
from hpcsolve.core.errors import CaseError
from hpcsolve.lbm.steppers import kernels_cupy, kernels_numba
from hpcsolve.lbm.steppers.gpu_common import AUTO_IN_PLACE_L2, SHORT_ROW, auto_in_place, bytes_per_cell, step_kernel_shape
from hpcsolve.lbm.steppers.stepper import LBMSetup
from hpcsolve.core.precision import FP16C, FP16S, FP32, FP64
from hpcsolve.report.bench_lbm import cavity_setup

H200_L2 = 60 * 1024**2   # cudaDevAttrL2CacheSize on the H200 (62,914,560 B)


def _edge(policy, fraction, l2=H200_L2):
    """The largest square edge whose one-array lattice takes at most ``fraction`` of ``l2``."""
    return math.isqrt(int(fraction * l2) // bytes_per_cell(policy, True)[1])


@pytest.mark.parametrize("policy", [FP32, FP64], ids=lambda p: p.name)
def test_auto_streams_in_place_where_one_array_fits_the_l2_cache(policy):
    lo, hi = AUTO_IN_PLACE_L2
    n_hi, n_lo = _edge(policy, hi), _edge(policy, lo)
    assert auto_in_place(cavity_setup(n_hi, policy), H200_L2)             # at most 0.65 of L2
    assert not auto_in_place(cavity_setup(n_hi + 1, policy), H200_L2)     # above it
    assert auto_in_place(cavity_setup(n_lo + 1, policy), H200_L2)         # above 0.3 of L2
    assert not auto_in_place(cavity_setup(n_lo, policy), H200_L2)         # two buffers fit comfortably
    assert not auto_in_place(cavity_setup(n_hi, policy), 0)               # unknown cache: two buffers
    # points of the H200 table: fp32 1024^2 (0.62 of L2) and fp64 724^2 (0.61) in place, fp32 1152^2 (0.78) / 256^2 not
    chosen = {n: auto_in_place(cavity_setup(n, policy), H200_L2) for n in (256, 724, 1024, 1152)}
    assert chosen == ({256: False, 724: True, 1024: True, 1152: False} if policy is FP32
                      else {256: False, 724: True, 1024: False, 1152: False})


@pytest.mark.parametrize("policy", [FP16S, FP16C], ids=lambda p: p.name)
def test_auto_keeps_two_buffers_for_16_bit_storage(policy):
    """16-bit storage keeps its two-cells-per-thread kernel (in place it would run one cell per thread)."""
    for n in (1024, 1448, 2048):
        assert not auto_in_place(cavity_setup(n, policy), H200_L2)


def test_auto_keeps_two_buffers_where_in_place_cannot_run_the_setup():
    """A cell with an outlet and an interpolated link: an explicit in-place request is an error naming
    lattice.streaming; 'auto' quietly keeps two buffers."""
    from hpcsolve.lbm.boundaries import bouzidi
    from hpcsolve.lbm.steppers import inplace
    from hpcsolve.lbm.flags import WALL

    setup = channel_with_bouzidi(nx=10, ny=8, policy=FP64)
    setup.flags[3:5, 7:9] = WALL
    mask = np.zeros(setup.flags.shape, dtype=bool)
    mask[3:5, 7:9] = True
    setup.links = bouzidi.build_links(setup.flags, [(mask, lambda j, i, cx, cy: np.full(np.shape(j), 0.4))])
    with pytest.raises(CaseError, match="lattice.streaming"):
        inplace.check(setup)
    l2 = 2 * bytes_per_cell(FP64, True)[1] * setup.flags.size    # the lattice takes half of this "cache"
    fine = channel_with_bouzidi(nx=10, ny=8, policy=FP64)
    assert auto_in_place(fine, l2) and not auto_in_place(setup, l2)


def test_kernel_shape_resolves_auto_and_keeps_explicit_choices():
    n = _edge(FP32, 0.5)
    shape = lambda in_place, **kw: step_kernel_shape(cavity_setup(n, FP32, in_place=in_place), kernels_cupy.LAUNCH,
                                                     kernels_cupy.LAUNCH_PAIRS, None, None, None, **kw)
    assert shape(None, l2_bytes=H200_L2)[0] is True
    assert shape(None, l2_bytes=0)[0] is False
    assert shape(False, l2_bytes=H200_L2)[0] is False
    assert shape(True, l2_bytes=0)[0] is True
    # 16-bit: two buffers whatever the cache; the pair kernel on grids of more than PER_CELL_CELLS cells
    n16 = 2 * math.isqrt(kernels_cupy.PER_CELL_CELLS)
    s16 = step_kernel_shape(cavity_setup(n16, FP16S, in_place=None), kernels_cupy.LAUNCH, kernels_cupy.LAUNCH_PAIRS,
                            None, None, None, H200_L2, kernels_cupy.LAUNCH_SHORT, kernels_cupy.PER_CELL_CELLS)
    assert s16 == (False, True, 2, kernels_cupy.LAUNCH_PAIRS[1])


@pytest.mark.parametrize("policy", [FP16S, FP16C], ids=lambda p: p.name)
@pytest.mark.parametrize("module", [kernels_cupy, kernels_numba], ids=["cupy", "numba-cuda"])
def test_16_bit_storage_runs_one_cell_per_thread_on_small_grids(module, policy):
    """pairs=None (the default): one cell per thread on grids of at most PER_CELL_CELLS cells, whatever their
    shape, the pair kernel (2 cells per thread) on larger grids with an even nx; pairs=True / False force either
    where it can run; odd rows and in-place streaming never take the pair kernel. Blocks: the short-row shape cut
    to the row's warps on rows of at most SHORT_ROW cells, else the backend's per-cell shape."""
    cells = module.PER_CELL_CELLS
    edge = math.isqrt(cells)
    assert edge * edge == cells and edge % 2 == 0 and edge > SHORT_ROW

    def shape(nx, pairs, ny=None, in_place=False):
        return step_kernel_shape(cavity_setup(nx, policy, in_place=in_place, ny=ny), module.LAUNCH,
                                 module.LAUNCH_PAIRS, pairs, None, None, 0, module.LAUNCH_SHORT, cells)

    short, long_ = module.LAUNCH_SHORT[2][1], module.LAUNCH[2][1]
    assert short == 256 and short != long_
    for nx, ny, block in [(64, None, 64), (100, None, 128), (SHORT_ROW, None, short), (SHORT_ROW + 2, None, long_),
                          (edge, None, long_), (4 * edge, edge // 4, long_), (edge // 4, 4 * edge, 128)]:
        assert nx * (ny or nx) <= cells
        got = shape(nx, None, ny)
        assert got == (False, False, 1, block), (nx, ny, got)
    assert shape(edge + 2, None)[1:] == (True, 2, module.LAUNCH_PAIRS[1])
    assert shape(edge, None, ny=edge + 1)[1:] == (True, 2, module.LAUNCH_PAIRS[1])     # one row more: pairs
    assert shape(64, True)[1:3] == (True, 2)                      # forced on a small grid
    assert shape(edge + 2, False)[1:3] == (False, 1)              # and off on a large one
    assert shape(edge + 3, True)[1] is False                      # odd nx: no pairs
    assert shape(edge + 2, True, in_place=True)[:2] == (True, False)


@pytest.mark.parametrize("nx, policy, block", [
    (SHORT_ROW, FP32, kernels_numba.LAUNCH_SHORT[4][1]), (SHORT_ROW + 128, FP32, kernels_numba.LAUNCH[4][1]),
    (64, FP32, 64), (65, FP32, 96), (SHORT_ROW - 31, FP32, SHORT_ROW), (SHORT_ROW, FP64, kernels_numba.LAUNCH[8][1])])
def test_short_rows_take_the_short_row_launch_shape(nx, policy, block):
    """Rows of at most SHORT_ROW cells: the backend's short-row block, cut to the row rounded up to whole warps
    (one block per row, no warp without a cell)."""
    setup = cavity_setup(nx, policy)
    got = step_kernel_shape(setup, kernels_numba.LAUNCH, kernels_numba.LAUNCH_PAIRS, None, None, None, 0,
                            kernels_numba.LAUNCH_SHORT)
    assert got == (False, False, 1, block)
    assert kernels_numba.LAUNCH_SHORT[4][1] != kernels_numba.LAUNCH[4][1]   # the rule changes something
    # an explicit block size wins
    assert step_kernel_shape(setup, kernels_numba.LAUNCH, kernels_numba.LAUNCH_PAIRS, None, None, 64, 0,
                             kernels_numba.LAUNCH_SHORT)[3] == 64


def test_setup_in_place_accepts_none_and_refuses_other_values():
    base = cavity_setup(8, FP64)
    assert dataclasses.replace(base, in_place=None).in_place is None
    assert dataclasses.replace(base, in_place=np.bool_(True)).in_place is True
    with pytest.raises(CaseError, match="in_place"):
        LBMSetup(base.flags, base.relaxation_time, in_place="auto")


def test_case_streaming_maps_to_the_setup():
    from pathlib import Path

    from hpcsolve.core.cases import load_case
    from hpcsolve.lbm.setup import build_setup

    case_file = Path(__file__).resolve().parents[2] / "cases" / "lid_driven_cavity.toml"
    got = {}
    for streaming in ("auto", "two-buffer", "in-place"):
        case = load_case(case_file, overrides=["lattice.resolution=16", f"lattice.streaming={streaming}"])
        got[streaming] = build_setup(case, FP64)[2].in_place
    assert got == {"auto": None, "two-buffer": False, "in-place": True}
    assert load_case(case_file).lattice.streaming == "auto"


def test_bench_streaming_is_an_lbm_option(capsys):
    rc = main(["bench", "fem", "--streaming", "two-buffer", "--quick"])
    err = capsys.readouterr().err
    assert rc == 2 and "--streaming" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exc:        # --in-place is gone: argparse's error names its replacement
        main(["bench", "lbm", "--in-place", "--quick"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "unrecognized arguments: --in-place" in err
    assert "use --streaming in-place" in err and "Traceback" not in err


def test_bench_auto_streaming_checks_both_layouts_and_reports_two_buffer_memory(tmp_path, monkeypatch):
    """`hpcsolve bench lbm` with auto streaming (the default) on a stand-in GPU backend: both step layouts are checked
    against the reference, each timed row shows the check of the layout it ran, and the largest grid is computed
    from two-buffer bytes (auto streams in place only where the lattice fits the L2 cache)."""
    from types import SimpleNamespace

    from hpcsolve.report import bench_lbm

    asked = []

    def check(backend, precision, in_place=False, pairs=None):
        asked.append((backend, precision, in_place, pairs))
        return {"size": 64, "steps": 50, "against": "numpy-fp32", "u_rel_l2": 3e-7 if in_place else 5e-7,
                "rho_minus_1_rel_l2": 0.0, "finite": True}

    def time_backend(backend, precision, n, **kw):
        ip = n == 1024          # as auto_in_place on the H200
        return {"backend": backend, "precision": precision, "size": n, "cells": n * n, "seconds_per_step": 1e-5,
                "seconds_spread": [1e-5, 1e-5], "mlups": n * n / 1e-5 / 1e6, "bytes_per_cell_step": 73,
                "effective_bandwidth_GBps": 1.0, "bytes_per_cell_resident": 37 if ip else 73, "in_place": ip}

    fake = SimpleNamespace(device_name="stand-in GPU", memory=lambda: (8 * 1024**3, 16 * 1024**3),
                           free_pool=lambda: None)
    monkeypatch.setattr(bench_lbm.backends, "probe", lambda b: SimpleNamespace(available=True, simulator=False, reason=""))
    monkeypatch.setattr(bench_lbm.backends, "get", lambda b: fake)
    monkeypatch.setattr(bench_lbm, "copy_bandwidth", lambda *a, **k: {"bandwidth_GBps": 4000.0})
    monkeypatch.setattr(bench_lbm, "time_numpy", lambda p, n, steps: {"precision": p, "size": n, "cells": n * n,
                                                                      "seconds_per_step": 1.0, "mlups": 1.0,
                                                                      "seconds_spread": [1.0, 1.0]})
    monkeypatch.setattr(bench_lbm, "check_against_reference", check)
    monkeypatch.setattr(bench_lbm, "time_backend", time_backend)
    args = SimpleNamespace(quick=False, out=tmp_path, sizes=[64, 1024], precisions=["fp32"], backends=["cupy"],
                           in_place=False, streaming=None)
    assert bench_lbm.main(args) == 0
    assert asked == [("cupy", "fp32", False, False), ("cupy", "fp32", True, False)]
    md = (tmp_path / "bench_lbm.md").read_text()
    row64 = next(line for line in md.splitlines() if line.startswith("| cupy | fp32 | 64^2"))
    row1024 = next(line for line in md.splitlines() if line.startswith("| cupy (in place) | fp32 | 1024^2"))
    assert "u 5.0e-07" in row64 and "u 3.0e-07" in row1024
    data = __import__("json").loads((tmp_path / "bench_lbm.json").read_text())
    assert data["streaming"] == "auto"
    (mem,) = data["memory"]
    assert mem["bytes_per_cell_resident"] == bytes_per_cell(FP32, False)[1] == 73
    assert mem["largest_square"] == bench_lbm._largest_square(8 * 1024**3, 73)
    # an explicit choice checks that layout only
    asked.clear()
    args.streaming = "in-place"
    assert bench_lbm.main(args) == 0
    assert asked == [("cupy", "fp32", True, False)] and (tmp_path / "bench_lbm_in_place.md").exists()


def test_bench_checks_both_16_bit_kernels_and_each_row_shows_its_own(monkeypatch, tmp_path):
    """16-bit storage: the pair kernel (large grids) and one cell per thread (small grids) are both checked against
    the reference, in-place streaming only per cell, and each timed row shows the check of the kernel it ran."""
    from types import SimpleNamespace

    from hpcsolve.report import bench_lbm

    assert bench_lbm.check_kernels("fp16c", None) == [(False, False), (False, True), (True, False)]
    assert bench_lbm.check_kernels("fp16s", False) == [(False, False), (False, True)]
    assert bench_lbm.check_kernels("fp32", None) == [(False, False), (True, False)]
    asked = []

    def check(backend, precision, in_place=False, pairs=None):
        asked.append((in_place, pairs))
        return {"size": 64, "steps": 50, "against": "numpy-fp64", "u_rel_l2": {(False, False): 1e-3, (False, True): 2e-3,
                (True, False): 4e-3}[(in_place, pairs)], "rho_minus_1_rel_l2": 0.0, "finite": True}

    def time_backend(backend, precision, n, **kw):
        return {"backend": backend, "precision": precision, "size": n, "cells": n * n, "seconds_per_step": 1e-5,
                "seconds_spread": [1e-5, 1e-5], "mlups": n * n / 1e-5 / 1e6, "bytes_per_cell_step": 37,
                "effective_bandwidth_GBps": 1.0, "bytes_per_cell_resident": 37, "in_place": False,
                "pairs": n > 512}

    fake = SimpleNamespace(device_name="stand-in GPU", memory=lambda: (8 * 1024**3, 16 * 1024**3),
                           free_pool=lambda: None)
    monkeypatch.setattr(bench_lbm.backends, "probe", lambda b: SimpleNamespace(available=True, simulator=False, reason=""))
    monkeypatch.setattr(bench_lbm.backends, "get", lambda b: fake)
    monkeypatch.setattr(bench_lbm, "copy_bandwidth", lambda *a, **k: {"bandwidth_GBps": 4000.0})
    monkeypatch.setattr(bench_lbm, "check_against_reference", check)
    monkeypatch.setattr(bench_lbm, "time_backend", time_backend)
    monkeypatch.setattr(bench_lbm, "time_numpy", lambda p, n, steps, repeats=3: {      # the NumPy fp64 baseline
        "backend": "numpy", "precision": p, "size": n, "cells": n * n, "seconds_per_step": 1e-2,
        "seconds_spread": [1e-2, 1e-2], "mlups": n * n / 1e-2 / 1e6, "cpu_threads": 1})
    args = SimpleNamespace(quick=False, out=tmp_path, sizes=[256, 1024], precisions=["fp16c"], backends=["cupy"],
                           in_place=False, streaming=None)
    assert bench_lbm.main(args) == 0
    assert asked == [(False, False), (False, True), (True, False)]
    md = (tmp_path / "bench_lbm.md").read_text().splitlines()
    assert "u 1.0e-03" in next(line for line in md if line.startswith("| cupy | fp16c | 256^2"))
    assert "u 2.0e-03" in next(line for line in md if line.startswith("| cupy | fp16c | 1024^2"))


def test_bench_sizes_beyond_the_device_are_said_not_tried(monkeypatch, tmp_path, capsys):
    """A size whose populations do not fit the device's free memory is not set up (the host arrays of a 99,999^2
    cavity took minutes on the H200 machine before the device refused them): rows of the kernels it does not fit
    say so with the memory figures; a size that fits none of them is exit 2 naming --sizes before anything runs."""
    from types import SimpleNamespace

    from hpcsolve import cli
    from hpcsolve.report import bench_lbm

    timed = []

    def time_backend(backend, precision, n, **kw):
        timed.append((precision, n))
        return {"backend": backend, "precision": precision, "size": n, "cells": n * n, "seconds_per_step": 1e-5,
                "seconds_spread": [1e-5, 1e-5], "mlups": n * n / 1e-5 / 1e6, "bytes_per_cell_step": 37,
                "effective_bandwidth_GBps": 1.0, "bytes_per_cell_resident": 37, "in_place": False}

    free = 8 * 1024**3
    fake = SimpleNamespace(device_name="stand-in GPU", memory=lambda: (free, 16 * 1024**3), free_pool=lambda: None)
    monkeypatch.setattr(bench_lbm.backends, "probe", lambda b: SimpleNamespace(available=True, simulator=False, reason=""))
    monkeypatch.setattr(bench_lbm.backends, "get", lambda b: fake)
    monkeypatch.setattr(bench_lbm, "copy_bandwidth", lambda *a, **k: {"bandwidth_GBps": 4000.0})
    monkeypatch.setattr(bench_lbm, "check_against_reference", lambda *a, **k: {
        "size": 64, "steps": 50, "against": "numpy-fp64", "u_rel_l2": 1e-12, "rho_minus_1_rel_l2": 0.0, "finite": True})
    monkeypatch.setattr(bench_lbm, "time_backend", time_backend)
    monkeypatch.setattr(bench_lbm, "time_numpy", lambda p, n, steps: {"precision": p, "size": n, "cells": n * n,
                                                                      "seconds_per_step": 1.0, "mlups": 1.0,
                                                                      "seconds_spread": [1.0, 1.0]})
    fp64_edge = bench_lbm._largest_square(free, bytes_per_cell(FP64, False)[1])
    fp16_edge = bench_lbm._largest_square(free, bytes_per_cell(FP16S, False)[1])
    assert fp64_edge < 12_000 < fp16_edge
    args = SimpleNamespace(quick=False, out=tmp_path, sizes=[64, 12_000], precisions=["fp64", "fp16s"],
                           backends=["cupy"], in_place=False, streaming=None)
    assert bench_lbm.main(args) == 0
    assert timed == [("fp64", 64), ("fp16s", 64), ("fp16s", 12_000)]
    md = (tmp_path / "bench_lbm.md").read_text()
    need = 12_000**2 * bytes_per_cell(FP64, False)[1] / 2**30
    assert (f"| cupy | fp64 | 12000^2 | not timed: needs {need:,.1f} GiB of device memory, 8.0 GiB free (largest "
            f"square that fits: {fp64_edge:,})") in md
    # fits none of the requested kernels: one error naming --sizes, nothing written or timed
    timed.clear()
    (tmp_path / "again").mkdir()
    capsys.readouterr()
    assert cli.main(["bench", "lbm", "--sizes", "64", "99999", "--backends", "cupy", "--precisions", "fp64", "fp16s",
                     "--out", str(tmp_path / "again")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hpcsolve: error: --sizes: no requested backend and precision fits 99,999^2 cells") and \
        f"grid edges up to {fp16_edge:,} on this device" in err, err
    assert timed == [] and not list((tmp_path / "again").iterdir())
