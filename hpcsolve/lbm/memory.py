"""Peak memory of an LBM run, from the case alone (see :mod:`hpcsolve.core.memory` for the method and
docs/design/reliability.md for the measured table)."""

from __future__ import annotations

import numpy as np

from hpcsolve.core import backends
from hpcsolve.core.memory import PLOT_BYTES, MiB, MemoryEstimate, case_plots, gpu_import_bytes
from hpcsolve.lbm import lattice


#: resident size of the process before the lattice exists: interpreter, NumPy, SciPy, h5py, tqdm
LBM_BASE_BYTES = 62 * MiB
#: ... and with a CUDA context and the GPU library loaded (CuPy or Numba-CUDA). The GPU constants
#: below are counted from the arrays the GPU steppers allocate, not yet measured (docs/design/reliability.md)
LBM_BASE_GPU_BYTES = 420 * MiB
#: host arrays of the geometry and setup per cell: flags (1), boundary velocity (2 x 8), masks
SETUP_BYTES_PER_CELL = 21
#: NumPy reference: one int64 gather index per population; the step's temporaries (pulled, post,
#: collision terms) are this many arrays of Q compute values per cell (measured)
GATHER_BYTES = 8
STEP_TEMPORARIES = 4.75
#: ... and a codec that converts in chunks (``policy.codec.conversion_chunk`` values at a time: FP16C) decodes and
#: encodes through this many bytes of temporaries per population value (hpcsolve/core/fp16c.py, uint32 arithmetic;
#: tracemalloc: 31 encode, 33 decode, 20 the step's stochastic encode), plus its float32 result
CODEC_TEMPORARY_BYTES = 34
#: one snapshot keeps velocity (2 x 8), pressure (8) and vorticity (8) per cell on the host
SNAPSHOT_BYTES_PER_CELL = 32
#: final fields on the host while the result is written: velocity 16, pressure, density, vorticity
#: 8 each, flags 4, the 3-component velocity written to HDF5 24, and the monitors' temporaries
RESULT_BYTES_PER_CELL = 110
#: GPU backends, host side per cell: setup, moments fetched at monitor points (3 compute values,
#: then float64 rho, ux, uy), speed and steady-state temporaries. Measured on the H200 (CuPy, cavity
#: fp64): 194 B/cell above the base at 4096^2, where 150 gave 0.77 of the measured peak
GPU_HOST_BYTES_PER_CELL = 200
#: GPU backends, device side per cell besides the populations and the larger of the moments (3
#: compute values) and the isfinite mask (1 byte per population): flags (1) and the allocator's rounding
GPU_DEVICE_EXTRA_PER_CELL = 2


def lbm_numpy_step_bytes(policy, cells: int) -> int:
    """Host bytes of the NumPy stepper on ``cells`` cells while stepping: two population arrays, the gather index,
    the step's temporaries and the setup (and the FP16C codec's chunked temporaries)."""
    q = lattice.Q
    step = (2 * q * policy.storage_bytes + q * GATHER_BYTES + STEP_TEMPORARIES * q * np.dtype(policy.compute).itemsize
            + SETUP_BYTES_PER_CELL) * cells
    step += min(q * cells, policy.codec.conversion_chunk) * CODEC_TEMPORARY_BYTES     # 0: a plain cast
    return int(step)


def estimate(case, derived, backend: str, policy) -> MemoryEstimate:
    """Peak memory of an LBM run of ``case`` (``derived`` from hpcsolve.lbm.case.derive)."""
    cells = derived.nx * derived.ny
    storage = policy.storage_bytes
    compute = np.dtype(policy.compute).itemsize
    q = lattice.Q
    snapshots = derived.steps // derived.output_every if derived.output_every else 0
    kept = snapshots * SNAPSHOT_BYTES_PER_CELL * cells
    plots = PLOT_BYTES if case_plots(case) else 0
    reduce = "lattice.resolution"
    if kept > cells * 2 * q * storage:
        reduce = "time.output_interval (fewer snapshots) or lattice.resolution"
    if not backends.get(backend).gpu:
        # the peak is while stepping, or while the result is written and plotted (the steps' memory is free then)
        step = lbm_numpy_step_bytes(policy, cells) / cells
        items = {"base": LBM_BASE_BYTES, "imports": gpu_import_bytes(), "snapshots": kept,
                 "peak arrays": int(max(step * cells, RESULT_BYTES_PER_CELL * cells + plots))}
        return MemoryEstimate(int(sum(items.values())), None, reduce,
                              f"{step:.0f} B/cell (2 population arrays, gather index, step temporaries) "
                              f"+ {snapshots} snapshots x {SNAPSHOT_BYTES_PER_CELL} B/cell"
                              + (" + the GPU libraries the backend probe loaded" if items["imports"] else ""), items)
    arrays = 1 if case.lattice.streaming == "in-place" else 2
    device = cells * (arrays * q * storage + max(q, 3 * compute) + GPU_DEVICE_EXTRA_PER_CELL)
    items = {"base": LBM_BASE_GPU_BYTES, "snapshots": kept,     # the GPU libraries are in the base
             "peak arrays": max(GPU_HOST_BYTES_PER_CELL * cells, RESULT_BYTES_PER_CELL * cells + plots)}
    return MemoryEstimate(int(sum(items.values())), int(device), reduce,
                          f"device: {arrays} population array{'s' if arrays > 1 else ''} of {q} x {storage} B "
                          f"+ flags, moments; host: setup, fields, {snapshots} snapshots", items)
