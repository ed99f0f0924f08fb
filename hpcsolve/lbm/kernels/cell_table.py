"""The step kernels' hash tables of boundary cells (the velocity cells and their u_w, the characteristic outlet's
reference outflow: ``boundaries.velocity.velocity_table``; the in-place outlet cells: ``gpu_common.InPlaceTables``):
open addressing with Fibonacci hashing and linear probing, built on the host here, probed by the kernels'
``table_home`` / ``boundary_velocity`` / ``outlet_index`` (both emitters)."""

from __future__ import annotations

import numpy as np

#: Fibonacci-hashing multiplier of the cell tables below (the kernels compute the same home slot)
HASH_MULT = 0x9E3779B97F4A7C15


def table_home(cells: np.ndarray, size: int) -> np.ndarray:
    """Home slot of each cell in a table of ``size`` slots (a power of two): bits 32.. of cell * HASH_MULT
    (mod 2^64), as the kernels' ``table_home`` computes it."""
    h = (np.asarray(cells, dtype=np.int64).astype(np.uint64) * np.uint64(HASH_MULT)) >> np.uint64(32)
    return (h & np.uint64(size - 1)).astype(np.int64)


def cell_table(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, slots): an open-addressing hash table of the linear cell indices ``cells`` (linear probing,
    at least twice as many slots as cells, a power of two; empty slots hold -1) and each cell's slot.
    A kernel finds a boundary cell's entry in one or two dependent loads, where a binary search over a
    sorted table took log2(n): on small grids those dependent loads set the step time (the lid row's
    velocity links did three searches each)."""
    cells = np.asarray(cells, dtype=np.int64).ravel()
    size = 2
    while size < 2 * cells.size:
        size *= 2
    keys = np.full(size, -1, dtype=np.int64)
    slots = np.empty(cells.size, dtype=np.int64)
    for j, (c, k) in enumerate(zip(cells.tolist(), table_home(cells, size).tolist())):
        while keys[k] != -1:
            k = (k + 1) & (size - 1)
        keys[k] = c
        slots[j] = k
    return keys, slots


def table_values(slots: np.ndarray, size: int, values: np.ndarray) -> np.ndarray:
    """(2, size) per-slot copy of per-cell ``values`` (2, n) (zeros in empty slots), contiguous."""
    out = np.zeros((values.shape[0], size), dtype=values.dtype)
    out[:, slots] = values
    return out
