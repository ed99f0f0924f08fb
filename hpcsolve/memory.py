"""Memory a run needs, from the case alone, before anything is allocated.

Each estimate is the peak resident memory of the process (host RSS) and, on a GPU, the peak device
memory the run allocates, as

    base (interpreter, libraries, CUDA context) + bytes per cell / per triangle x size,

where the bytes per cell or triangle count the arrays each backend holds at its peak (named below)
and the temporaries of the NumPy expressions are a measured multiple of them. The coefficients
were measured with ``scripts/memory_estimates.py`` (estimate vs measured peak, several sizes; the
table is in docs/reliability.md); the estimates are meant to be within 20 % of the measured peak.
A run that does not fit is refused before it allocates, naming the case field to reduce.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hpcsolve import backends
from hpcsolve.lbm import lattice

MiB = 2**20


@dataclass(frozen=True)
class MemoryEstimate:
    host_bytes: int              # peak resident memory of the process
    device_bytes: int | None     # peak device memory allocated by the run (GPU backends), else None
    reduce: str                  # the case field to reduce when it does not fit
    basis: str                   # what the estimate counts, in one line

    def summary(self) -> dict:
        out = {"host_memory_bytes": self.host_bytes, "memory_reduce_field": self.reduce}
        if self.device_bytes is not None:
            out["device_memory_bytes"] = self.device_bytes
        return out


# ------------------------------------------------------------------------------------------------
# LBM

#: resident size of the process before the lattice exists: interpreter, NumPy, SciPy, h5py, tqdm
LBM_BASE_BYTES = 62 * MiB
#: ... and with a CUDA context and the GPU library loaded (CuPy or Numba-CUDA). The GPU constants
#: below are counted from the arrays the GPU steppers allocate, not yet measured (docs/reliability.md)
LBM_BASE_GPU_BYTES = 420 * MiB
#: matplotlib and the figures of the plots (drawn on at most 1000 x 1000 cells)
PLOT_BYTES = 48 * MiB
#: host arrays of the geometry and setup per cell: flags (1), boundary velocity (2 x 8), masks
SETUP_BYTES_PER_CELL = 21
#: NumPy reference: one int64 gather index per population; the step's temporaries (pulled, post,
#: collision terms) are this many arrays of Q compute values per cell (measured)
GATHER_BYTES = 8
STEP_TEMPORARIES = 4.75
#: ... and a custom 16-bit format (policy.codec, FP16C) decodes and encodes through this many bytes of
#: temporaries per population value (hpcsolve/fp16c.py, uint32 arithmetic; tracemalloc: 31 encode, 33 decode,
#: 20 the step's stochastic encode), for at most fp16c.CHUNK values at a time, plus its float32 result
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
    import numpy as np

    q = lattice.Q
    step = (2 * q * policy.storage_bytes + q * GATHER_BYTES + STEP_TEMPORARIES * q * np.dtype(policy.compute).itemsize
            + SETUP_BYTES_PER_CELL) * cells
    if policy.codec:
        from hpcsolve import fp16c

        step += min(q * cells, fp16c.CHUNK) * CODEC_TEMPORARY_BYTES
    return int(step)


def lbm(case, derived, backend: str, policy) -> MemoryEstimate:
    """Peak memory of an LBM run of ``case`` (``derived`` from hpcsolve.lbm.case.derive)."""
    import numpy as np

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
        host = LBM_BASE_BYTES + kept + max(step * cells, RESULT_BYTES_PER_CELL * cells + plots)
        return MemoryEstimate(int(host), None, reduce,
                              f"{step:.0f} B/cell (2 population arrays, gather index, step temporaries) "
                              f"+ {snapshots} snapshots x {SNAPSHOT_BYTES_PER_CELL} B/cell")
    arrays = 1 if case.lattice.streaming == "in-place" else 2
    device = cells * (arrays * q * storage + max(q, 3 * compute) + GPU_DEVICE_EXTRA_PER_CELL)
    host = LBM_BASE_GPU_BYTES + kept + max(GPU_HOST_BYTES_PER_CELL * cells, RESULT_BYTES_PER_CELL * cells + plots)
    return MemoryEstimate(int(host), int(device), reduce,
                          f"device: {arrays} population array{'s' if arrays > 1 else ''} of {q} x {storage} B "
                          f"+ flags, moments; host: setup, fields, {snapshots} snapshots")


def case_plots(case) -> bool:
    output = getattr(case, "output", None)
    return bool(getattr(output, "plots", True))


# ------------------------------------------------------------------------------------------------
# FEM

#: resident size before the mesh exists: interpreter, NumPy, SciPy (sparse, SuperLU), h5py
FEM_BASE_BYTES = 70 * MiB
FEM_BASE_GPU_BYTES = 420 * MiB
#: per triangle at the peak (assembly: COO triplets of (3 ncomp)^2 entries as int64 rows, cols and
#: float64 values, their sorted CSR copy, the condensed matrix; the Krylov vectors), by unknowns
#: per node (measured)
FEM_BYTES_PER_TRIANGLE = {1: 440, 2: 1540}
#: a manufactured solution: the 6-point quadrature of the error norms and the exact fields, per triangle
MANUFACTURED_BYTES_PER_TRIANGLE = 240
#: the float64 reference (SuperLU, COLAMD ordering): the factors' fill grows like
#: coefficient * unknowns^power bytes, by unknowns per node (fitted to measured runs)
REFERENCE_FILL = {1: (42.0, 1.30), 2: (786.0, 1.10)}
#: GPU device side: CSR matrix (values, int32 columns, row pointers) and 10 Krylov vectors
DEVICE_VECTORS = 10


def fem_mesh_size(case) -> tuple[int, int]:
    """(points, triangles) of the case's mesh after refinement, from the case (and the header of a
    mesh file) without building it."""
    m = case.mesh
    if m.kind in ("rectangle", "cook_membrane"):
        nx = m.nx
        ny = (m.ny or m.nx) if m.kind == "rectangle" else m.nx
        points, triangles = (nx + 1) * (ny + 1), 2 * nx * ny
    else:
        points, triangles = _file_mesh_size(case)
    edges = points + triangles - 1        # Euler's formula for a planar mesh without holes
    for _ in range(m.refine):
        points, edges, triangles = points + edges, 2 * edges + 3 * triangles, 4 * triangles
    return points, triangles


def _file_mesh_size(case) -> tuple[int, int]:
    from pathlib import Path

    from hpcsolve.safe_io import MESH_FILE_MAX_BYTES, gmsh_counts, regular_file

    path = Path(case.mesh.path)
    if not path.is_absolute():
        path = case.base_dir / path
    allowed = "a mesh file meshio can read (2D triangles, e.g. gmsh .msh); relative paths: to the case file"
    st = regular_file(path, "mesh.path", allowed, max_bytes=MESH_FILE_MAX_BYTES)
    if path.suffix.lower() == ".msh":
        counts = gmsh_counts(path, "mesh.path", allowed)
        nodes = counts.get("nodes", 0)
        return nodes, max(counts.get("elements", 0), 2 * nodes)
    nodes = max(1, st.st_size // 24)      # other formats: at least ~24 bytes per node
    return nodes, 2 * nodes


#: multigrid on the device, per unknown: levels (operator complexity ~1.35 of the matrix in float32,
#: int32 indices; the finest level stored by diagonals is a copy of its own: 7 (scalar) to ~20 (elasticity)
#: diagonals), P and R, five vectors per level, and the float64 SpGEMM products of the set-up
MG_DEVICE_BYTES_PER_UNKNOWN = {1: 460, 2: 1000}
AMG_HOST_BYTES_PER_UNKNOWN = 600    # pyamg's smoothed-aggregation hierarchy (float64, int32) and its temporaries


def fem(case, backend: str, policy) -> MemoryEstimate:
    """Peak memory of an FEM run of ``case``, from the mesh size the case implies."""
    points, triangles = fem_mesh_size(case)
    ncomp = 1 if case.problem.kind == "poisson" else 2
    unknowns = points * ncomp
    s = case.solve
    per_triangle = FEM_BYTES_PER_TRIANGLE[ncomp]
    if case.problem.kind == "poisson" and case.problem.manufactured:
        per_triangle += MANUFACTURED_BYTES_PER_TRIANGLE
    host = triangles * per_triangle
    reference = s.reference == "always" or (s.reference == "auto" and unknowns <= s.reference_max_dofs)
    if reference:
        coefficient, power = REFERENCE_FILL[ncomp]
        host += coefficient * float(unknowns) ** power
    if case_plots(case):      # the figures are drawn after the solve, when its arrays are free
        host = max(host, PLOT_BYTES)
    from hpcsolve.fem.runner import preconditioner_name

    pc = preconditioner_name(case, None, policy)
    if pc == "amg":                       # pyamg's hierarchy on the host
        host += unknowns * AMG_HOST_BYTES_PER_UNKNOWN
    reduce = "mesh.refine" if case.mesh.refine else ("mesh.nx" if case.mesh.kind != "file" else "mesh.path")
    device = None
    base = FEM_BASE_BYTES
    if backends.get(backend).gpu:
        base = FEM_BASE_GPU_BYTES
        nnz = unknowns * (7 if ncomp == 1 else 14)
        device = int(nnz * (policy.storage_bytes + 4 + (8 + 4 if policy.storage_bytes != 8 else 0))
                     + (unknowns + 1) * 4 + DEVICE_VECTORS * unknowns * 8)
        if pc in ("mg", "amg"):           # the hierarchy, and the Galerkin products while it is built
            device += int(unknowns * MG_DEVICE_BYTES_PER_UNKNOWN[ncomp])
    basis = (f"{triangles:,} triangles x {per_triangle} B" + (", float64 reference (SuperLU)" if reference else ""))
    return MemoryEstimate(int(base + host), device, reduce, basis)


def describe(estimate: MemoryEstimate) -> str:
    """One line for `hpcsolve validate` / `--dry-run`."""
    text = f"{estimate.host_bytes / 2**30:.2f} GiB host"
    if estimate.device_bytes is not None:
        text += f", {estimate.device_bytes / 2**30:.2f} GiB device"
    return f"{text} ({estimate.basis})"


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if math.isfinite(n) else str(n)
