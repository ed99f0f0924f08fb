"""Launch geometry of the LBM GPU kernels, written once: the CuPy stepper (``kernels_cupy``) and the Numba-CUDA
stepper (``kernels_numba``) both take their grids from here, so the CPU suite tests the arithmetic that sizes every
launch (``tests/lbm/test_mutation_kills_lbm.py``: each grid covers every item, with less than one block to spare).

- one item per thread (the Bouzidi pre-pass, moments, force, fill, scale, perturb, finiteness kernels):
  :func:`blocks` of :data:`THREADS` threads;
- the step kernels: :func:`step_grid`, a row of cells per ``grid.y``, ``block_x`` threads of ``cells_per_thread``
  adjacent cells each along x (the 16-bit pair kernel: 2 cells per thread).
"""

from __future__ import annotations

#: threads per block of the one-item-per-thread kernels
THREADS = 256


def blocks(n: int, threads: int = THREADS) -> int:
    """Blocks of ``threads`` threads that cover ``n`` items, one per thread: ceil(n / threads) (0 for n = 0)."""
    return (int(n) + threads - 1) // threads


def step_grid(nx: int, ny: int, block_x: int, cells_per_thread: int) -> tuple[int, int]:
    """(grid.x, grid.y) of a step kernel: ceil(nx / (block_x cells_per_thread)) blocks along a row, one row of
    cells per grid.y."""
    per_block = int(block_x) * int(cells_per_thread)
    return (int(nx) + per_block - 1) // per_block, int(ny)
