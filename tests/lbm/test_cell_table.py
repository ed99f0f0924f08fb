"""The GPU kernels find boundary cells (velocity cells, in-place outlet cells) in a hash table
(``gpu_common.cell_table``). ``lookup`` below is the kernels' probe loop written in Python (the same
home slot, linear probing, stop at the key or at an empty slot); the kernels themselves are checked
against the NumPy reference under the simulator (test_cudasim_lbm.py) and on the GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcsolve.lbm.steppers import inplace
from hpcsolve.lbm.flags import VELOCITY
from hpcsolve.lbm.boundaries.velocity import velocity_table
from hpcsolve.lbm.kernels.cell_table import cell_table, table_home
from hpcsolve.core.precision import FP32, FP64
from hpcsolve.report.bench_lbm import cavity_setup

from lbm_gpu_cases import channel


def lookup(keys: np.ndarray, cell: int) -> int:
    size = keys.size
    k = int(table_home(np.array([cell]), size)[0])
    probes = 0
    while keys[k] != cell and keys[k] != -1:
        k = (k + 1) & (size - 1)
        probes += 1
        assert probes <= size
    return k if keys[k] == cell else -1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2**40), min_size=0, max_size=300, unique=True), st.integers(0, 2**40))
def test_every_cell_is_found_at_its_slot_and_absent_cells_are_not(cells, other):
    cells = np.array(cells, dtype=np.int64)
    keys, slots = cell_table(cells)
    assert keys.size >= max(2, 2 * cells.size) and keys.size & (keys.size - 1) == 0
    assert np.count_nonzero(keys != -1) == cells.size
    for c, s in zip(cells.tolist(), slots.tolist()):
        assert keys[s] == c and lookup(keys, c) == s
    if other not in set(cells.tolist()):
        assert lookup(keys, other) == -1


def test_rows_and_columns_of_cells_take_few_probes():
    """The boundaries the cases have (a lid row, an inlet column on a power-of-two width): Fibonacci
    hashing spreads them, so the mean probe count stays near one."""
    for cells in (np.arange(8192, dtype=np.int64) + 8191 * 8192, np.arange(4096, dtype=np.int64) * 8192 + 1):
        keys, slots = cell_table(cells)
        home = table_home(cells, keys.size)
        extra = (slots - home) & (keys.size - 1)
        assert extra.mean() < 0.6, extra.mean()


def test_velocity_table_gives_each_velocity_cell_its_boundary_velocity():
    setup = cavity_setup(48, FP64)
    keys, uw = velocity_table(setup, np.float64)
    cells = np.flatnonzero(setup.flags.ravel() == VELOCITY)
    assert cells.size == 48 and uw.shape == (2, keys.size)
    want = setup.boundary_velocity.reshape(2, -1)[:, cells]
    got = np.array([uw[:, lookup(keys, c)] for c in cells]).T
    assert np.array_equal(got, want) and np.abs(want[0]).max() > 0


def test_outlet_table_holds_the_outlet_velocities_per_slot():
    from hpcsolve.lbm.steppers.gpu_common import InPlaceTables

    setup = dataclasses.replace(channel(policy=FP32), in_place=True)
    tables = InPlaceTables(setup, np.asarray, lambda links: None)
    rng = np.random.default_rng(3)
    g = rng.uniform(0.0, 0.1, size=(9,) + setup.shape).astype(np.float32)
    u = tables.own_velocity_table(lambda cells: g.reshape(9, -1)[:, cells]).reshape(2, -1)
    want = inplace.own_velocities(g.reshape(9, -1)[:, tables.cells], setup)
    assert tables.cells.size > 0
    for j, c in enumerate(tables.cells.tolist()):
        assert np.array_equal(u[:, lookup(tables.out_cells, c)], want[:, j])
    others = np.setdiff1d(np.arange(setup.flags.size), tables.cells)
    assert all(lookup(tables.out_cells, c) == -1 for c in others.tolist())
