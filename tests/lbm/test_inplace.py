"""CPU checks of the in-place streaming layouts (hpcsolve/lbm/steppers/inplace.py): the odd layout is a
permutation of the slots, to_even inverts it, the outlet table is what the outlet rule needs, and
the memory accounting halves the population bytes. The kernels themselves are checked against the
reference under the CUDA simulator (test_cudasim_lbm.py) and on the GPU (test_gpu_lbm.py)."""

import numpy as np

from hpcsolve.lbm.steppers import inplace
from hpcsolve.lbm import lattice
from hpcsolve.lbm.steppers.gpu_common import bytes_per_cell
from hpcsolve.lbm.flags import FLUID, OUTLET
from hpcsolve.core.precision import FP16S, FP32, FP64

from lbm_gpu_cases import channel


def test_odd_layout_is_a_permutation_and_to_even_inverts_it():
    shape = (5, 7)
    n = shape[0] * shape[1]
    pos = np.arange(lattice.Q * n)
    odd = inplace.odd_positions(pos, shape)
    assert np.array_equal(np.sort(odd), pos)                       # every slot used once
    i, cell = np.divmod(pos, n)
    assert np.array_equal(odd // n, np.asarray(lattice.OPPOSITE)[i])  # f*_i(x) sits in slot opp(i)
    assert np.array_equal(odd[:n], pos[:n])                          # the rest population stays put
    rng = np.random.default_rng(0)
    g = rng.standard_normal((lattice.Q,) + shape)
    g_odd = np.empty(lattice.Q * n)
    g_odd[odd] = g.reshape(-1)
    flags = np.zeros(shape, np.uint8)
    flags[0, 2] = 1
    back = inplace.to_even(g_odd, flags)
    fluid = flags == FLUID
    assert np.array_equal(back[:, fluid], g[:, fluid]) and np.all(back[:, ~fluid] == 0)


def test_outlet_cells_are_the_cells_with_an_outlet_link():
    setup = channel(nx=10, ny=8)
    cells = inplace.own_velocity_cells(setup)
    ny, nx = setup.shape
    y, x = np.divmod(cells, nx)
    assert np.all(x == nx - 2) and sorted(y.tolist()) == list(range(1, ny - 1))
    assert np.all(setup.flags.ravel()[cells + 1] == OUTLET)
    u = inplace.own_velocities(setup.initial_populations().reshape(lattice.Q, -1)[:, cells], setup)
    assert u.shape == (2, cells.size) and np.abs(u).max() > 1e-3


def test_in_place_halves_the_resident_population_bytes():
    for pol, two, one in ((FP64, 145, 73), (FP32, 73, 37), (FP16S, 37, 19)):
        assert bytes_per_cell(pol) == (two, two)
        assert bytes_per_cell(pol, in_place=True) == (two, one)
