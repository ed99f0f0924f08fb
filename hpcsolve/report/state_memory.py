"""The solver state a comparison row counts (``state_MiB``): what changes with the precision, from a run's own derived
values and its preconditioner's hierarchy."""

from __future__ import annotations

import numpy as np

from hpcsolve.core.results import Result
from hpcsolve.fem.linalg.precond.mg_options import HIERARCHIES
from hpcsolve.fem.memory import DEVICE_VECTORS as FEM_VECTORS
from hpcsolve.lbm.lattice import Q as LBM_Q


def state_memory(res: Result, policy) -> tuple[int | None, str]:
    """(bytes, basis) of the solver state of a run, from its own derived values: LBM populations (2 x 9 x cells x
    storage bytes; 1 x in place), FEM matrix (values at storage precision + int32 indices + row pointers), Krylov
    vectors (FEM_VECTORS at compute precision) and the multigrid hierarchy's levels (preconditioner_info)."""
    d, storage = res.derived, int(policy.storage_bytes)
    if "nx" in d and "ny" in d:
        arrays = 1 if d.get("streaming") == "in-place" else 2
        cells = int(d["nx"]) * int(d["ny"])
        return arrays * LBM_Q * cells * storage, f"{arrays} x {LBM_Q} x {cells:,} cells x {storage} B populations"
    if "matrix_nnz" in d:
        rows, nnz = int(d.get("free_unknowns", d.get("unknowns", 0))), int(d["matrix_nnz"])
        compute = np.dtype(policy.compute).itemsize
        total = nnz * (storage + 4) + (rows + 1) * 4 + FEM_VECTORS * rows * compute
        basis = f"matrix {nnz:,} nnz x ({storage}+4) B, {FEM_VECTORS} vectors x {rows:,} x {compute} B"
        info = res.metrics.get("preconditioner_info") or {}
        if isinstance(info.get("nnz"), list) and isinstance(info.get("rows"), list):
            level = HIERARCHIES.get(str(info.get("hierarchy")))
            hb = int(level.storage_bytes) if level is not None else storage
            total += sum(int(n) for n in info["nnz"]) * (hb + 4) + sum(int(r) for r in info["rows"]) * 4
            basis += f", hierarchy {len(info['rows'])} levels x {hb} B"
        return int(total), basis
    return None, ""
