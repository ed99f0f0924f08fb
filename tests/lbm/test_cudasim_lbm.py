"""Numba-CUDA LBM kernels under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) against the NumPy
reference, on tiny grids: every boundary rule, both collision models, every precision.

The simulator executes the kernel in Python, thread by thread, with the same NumPy scalar
arithmetic as the reference; so agreement is expected to be (nearly) exact. What this checks
is the kernel logic: indexing, periodic wrap, which rule applies to which link, load/store
with shift and scale, the device observables.
"""

import numpy as np
import pytest

from hpcsolve.lbm.boundaries.force import momentum_exchange_force
from hpcsolve.lbm.steppers.stepper import get_stepper
from hpcsolve.core.precision import FP16C, FP16S, FP32, FP64

from lbm_gpu_cases import GEOMETRIES, channel, obstacle_mask, rel_diff, shifted, with_layer

pytestmark = pytest.mark.cudasim

STEPS = 3
# relative L2 bound of the shifted populations vs the reference of the same precision
BOUND = {"fp64": 1e-14, "fp32": 1e-6, "fp16s": 1e-3, "fp16c": 1e-3}


def _reference_and_numba(setup, steps=STEPS, **options):
    """The NumPy reference and the Numba-CUDA stepper on ``setup`` (with the stepper's ``options``, else as
    ``get_stepper`` makes it), both advanced ``steps`` steps."""
    ref = get_stepper("numpy", setup)
    dev = get_stepper("numba-cuda", setup, **options)
    ref.step(steps)
    dev.step(steps)
    return ref, dev


@pytest.mark.parametrize("precision", [FP64, FP32, FP16S, FP16C], ids=lambda p: p.name)
@pytest.mark.parametrize("collision", ["bgk", "trt"])
@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
def test_numba_kernel_matches_reference(geometry, collision, precision):
    if geometry == "fully_periodic" and precision is not FP64:
        pytest.skip("wrap logic is precision-independent; checked in fp64 (keeps the simulator run short)")
    setup = GEOMETRIES[geometry](collision=collision, policy=precision)
    ref, dev = _reference_and_numba(setup)
    h_ref, h_dev = shifted(ref), shifted(dev)
    assert np.abs(h_ref).max() > 1e-3   # the state moved away from rest
    err = rel_diff(h_dev, h_ref)
    assert err <= BOUND[precision.name], err
    assert dev.time_step == STEPS


def test_device_observables_match_reference():
    setup = channel(collision="trt", policy=FP64)
    ref = get_stepper("numpy", setup)
    dev = get_stepper("numba-cuda", setup)
    ref.step(2)
    dev.step(2)
    for a, b in zip(dev.macroscopic(), ref.macroscopic()):
        assert rel_diff(a, b) <= 1e-14
    mask = obstacle_mask(setup)
    f_ref = momentum_exchange_force(ref.populations(), setup, mask)
    f_dev = dev.force(mask)
    assert abs(f_ref[0]) > 1e-6
    assert np.allclose(f_dev, f_ref, rtol=1e-12, atol=1e-15), (f_dev, f_ref)
    assert dev.finite()


@pytest.mark.parametrize("cells_per_thread, block_x", [(3, 4), (2, 32)])
def test_numba_kernel_launch_shapes(cells_per_thread, block_x):
    """Several cells per thread and blocks that overhang the grid edge give the same result."""
    from hpcsolve.lbm.steppers.kernels_numba import NumbaCudaStepper

    setup = channel(nx=13, ny=6, collision="trt", policy=FP16S)
    ref = get_stepper("numpy", setup)
    dev = NumbaCudaStepper(setup, cells_per_thread=cells_per_thread, block_x=block_x)
    ref.step(STEPS)
    dev.step(STEPS)
    err = rel_diff(shifted(dev), shifted(ref))
    assert err <= BOUND["fp16s"], err


@pytest.mark.parametrize("precision, pairs", [(FP64, None), (FP16S, None), (FP16S, True)],
                         ids=["fp64", "fp16s", "fp16s-pairs"])
def test_numba_kernel_with_bouzidi_links_matches_reference(precision, pairs):
    """Interpolated links against the reference; 16-bit storage both in the per-cell kernel (the default on a
    grid this small) and in the pair kernel's boundary path."""
    pytest.importorskip("hpcsolve.lbm.boundaries.bouzidi")
    from lbm_gpu_cases import channel_with_bouzidi

    setup = channel_with_bouzidi(collision="trt", policy=precision)
    assert len(setup.links) > 0
    ref, dev = _reference_and_numba(setup, **({} if pairs is None else {"pairs": pairs}))
    assert dev.pairs == bool(pairs)
    err = rel_diff(shifted(dev), shifted(ref))
    assert err <= BOUND[precision.name], err
    mask = obstacle_mask(setup)
    f_ref = momentum_exchange_force(ref.populations(), setup, mask)
    assert np.allclose(dev.force(mask), f_ref, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("geometry, size", [("channel", (16, 10)), ("fully_periodic", (8, 6)),
                                            ("periodic_couette", (12, 7))])
@pytest.mark.parametrize("collision", ["bgk", "trt"])
@pytest.mark.parametrize("policy", [FP16S, FP16C], ids=lambda p: p.name)
def test_numba_pair_kernel_equals_per_cell_kernel(geometry, size, collision, policy):
    """16-bit storage, even nx: the two-cells-per-thread kernel (uint32 loads of float16 or FP16C pairs,
    neighbour-pair halves for c_x = +-1, pair-index wrap, packed stores) gives bit for bit the
    per-cell kernel's populations, and agrees with the NumPy reference within the policy's bound."""
    from hpcsolve.lbm.steppers.kernels_numba import NumbaCudaStepper

    nx, ny = size
    setup = GEOMETRIES[geometry](nx=nx, ny=ny, collision=collision, policy=policy)
    pair = NumbaCudaStepper(setup, pairs=True)
    cell = NumbaCudaStepper(setup, pairs=False)
    assert pair.pairs and not cell.pairs
    ref = get_stepper("numpy", setup)
    for s in (pair, cell, ref):
        s.step(STEPS)
    g_pair, g_cell = pair.populations(), cell.populations()
    assert np.abs(shifted(ref)).max() > 1e-3
    assert np.array_equal(g_pair.view(np.uint16), g_cell.view(np.uint16))
    assert rel_diff(shifted(pair), shifted(ref)) <= BOUND[policy.name]


@pytest.mark.parametrize("precision", [FP64, FP32], ids=lambda p: p.name)
def test_numba_smooth_start_matches_reference(precision):
    """Boundary velocities ramped on the device (setup.ramp_steps) as in the reference: two ramp
    steps, then full velocities."""
    setup = channel(collision="trt", policy=precision)
    setup.ramp_steps = 2
    ref, dev = _reference_and_numba(setup)
    err = rel_diff(shifted(dev), shifted(ref))
    assert err <= BOUND[precision.name], err
    assert dev.velocity_scale == 1.0 and dev.time_step == STEPS


# -- in-place streaming (AA pattern, hpcsolve/lbm/steppers/inplace.py) ----------------------------------------

IN_PLACE_CASES = [(g, p) for g in sorted(GEOMETRIES) for p in (FP64, FP32)] + [("channel", FP16S), ("bouzidi", FP64),
                                                                                 ("bouzidi", FP16S)]


@pytest.mark.parametrize("geometry, precision", IN_PLACE_CASES, ids=lambda v: v if isinstance(v, str) else v.name)
def test_numba_in_place_matches_reference(geometry, precision):
    """One population array, layouts alternating every step: populations, moments and the device
    force equal the reference after an odd (odd layout) and an even (even layout) number of steps."""
    from lbm_gpu_cases import channel_with_bouzidi

    setup = (channel_with_bouzidi if geometry == "bouzidi" else GEOMETRIES[geometry])(collision="trt", policy=precision)
    setup.in_place = True
    ref, dev = _reference_and_numba(setup)
    assert dev.in_place and dev.b is None and not dev.pairs
    for parity in (1, 0):
        assert dev.parity == parity
        h_ref, h_dev = shifted(ref), shifted(dev)
        assert np.abs(h_ref).max() > 1e-3
        assert rel_diff(h_dev, h_ref) <= BOUND[precision.name]
        for a, b in zip(dev.macroscopic(), ref.macroscopic()):
            assert rel_diff(a, b) <= BOUND[precision.name]
        if geometry in ("channel", "bouzidi"):
            mask = obstacle_mask(setup)
            f_ref = momentum_exchange_force(ref.populations(), setup, mask)
            assert np.allclose(dev.force(mask), f_ref, rtol=1e-12, atol=1e-15), (dev.force(mask), f_ref)
        ref.step(1)
        dev.step(1)


def test_numba_in_place_restart_and_smooth_start():
    """A state loaded at an odd step count (checkpoint restart) continues in place as the reference,
    through the even and the odd Bouzidi pre-pass; the smooth start works in place."""
    from lbm_gpu_cases import channel_with_bouzidi

    setup = channel_with_bouzidi(collision="bgk", policy=FP64)
    setup.in_place = True
    setup.ramp_steps = 4
    ref, dev = _reference_and_numba(setup)   # 3 steps: odd layout
    dev.load_populations(ref.populations(), ref.time_step)
    assert dev.parity == 0
    ref.step(3)
    dev.step(3)
    assert rel_diff(shifted(dev), shifted(ref)) <= BOUND["fp64"]


def test_auto_streaming_keeps_two_buffers_under_the_simulator():
    """lattice.streaming = 'auto' (in_place None): the simulator reports no L2 cache, so two buffers, and the
    result is the reference's."""
    from numba import cuda

    from hpcsolve.lbm.steppers.kernels_numba import l2_cache_bytes
    from hpcsolve.report.bench_lbm import cavity_setup

    assert l2_cache_bytes(cuda) == 0
    setup = cavity_setup(8, FP32, in_place=None)
    setup.initial_velocity = np.random.default_rng(3).uniform(-0.02, 0.02, (2,) + setup.shape)
    ref, dev = _reference_and_numba(setup, steps=4)
    assert dev.in_place is False and dev.b is not None
    assert rel_diff(shifted(dev), shifted(ref)) <= BOUND["fp32"]


def test_in_place_refuses_a_cell_with_outlet_and_interpolated_links():
    from hpcsolve.core.errors import CaseError
    from hpcsolve.lbm.boundaries import bouzidi
    from hpcsolve.lbm.flags import WALL

    setup = channel(nx=10, ny=8, policy=FP64)
    setup.flags[3:5, 7:9] = WALL          # an obstacle next to the outlet column (x = 9)
    mask = np.zeros(setup.flags.shape, dtype=bool)
    mask[3:5, 7:9] = True
    setup.links = bouzidi.build_links(setup.flags, [(mask, lambda j, i, cx, cy: np.full(np.shape(j), 0.4))])
    setup.in_place = True
    with pytest.raises(CaseError, match="lattice.streaming"):
        get_stepper("numba-cuda", setup)


def _stand_in_graphs(stepper):
    """StepGraphs whose 'capture' records each step launch with its arguments bound, as a CUDA graph does, and
    replays those (the simulator has no graphs): a stale pointer in a recording shows up as a wrong result."""
    from hpcsolve.lbm.steppers.gpu_common import StepGraphs

    state = {"rec": None}

    class Recorded:
        def __init__(self, k):
            self.k = k

        def __call__(self, *args):
            if state["rec"] is not None:
                state["rec"].append((self.k, args))
            else:
                self.k(*args)

    stepper._launch = {layout: Recorded(k) for layout, k in stepper._launch.items()}   # one per step layout

    def capture(fn):
        state["rec"] = []
        try:
            fn()
        finally:
            ops, state["rec"] = state["rec"], None

        def replay():
            for k, args in ops:
                k(*args)
        return replay

    stepper.graphs = StepGraphs(capture)
    return stepper


@pytest.mark.parametrize("in_place", [False, True], ids=["two-buffer", "in-place"])
def test_recorded_steps_after_perturb_equal_direct_launches(in_place):
    """perturb() in place makes a new outlet-velocity table: runs recorded before it must not replay the old
    one (they are dropped); with two buffers nothing is replaced. Bitwise against graphs=False."""
    import dataclasses

    from hpcsolve.lbm.steppers.kernels_numba import NumbaCudaStepper

    # the smallest channel that keeps inlet, outlet, walls and the obstacle (the simulator runs every thread in
    # Python); an even step count, so the in-place layout passes through both of its kernels
    setup = dataclasses.replace(channel(nx=8, ny=6, collision="trt", policy=FP64), in_place=in_place)
    # blocks of 8 threads (one row of the channel) instead of 256: the simulator runs every thread of a block
    fast = _stand_in_graphs(NumbaCudaStepper(setup, block_x=8))
    slow = NumbaCudaStepper(setup, graphs=False, block_x=8)
    for st in (fast, slow):
        for _ in range(3):
            st.step(2)                 # first use launched, then recorded, then replayed
        st.perturb(1e-3, seed=3)
        for _ in range(2):
            st.step(2)
    assert fast.graphs.enabled and any(r is not None for _, r in fast.graphs._cache.values())
    assert np.array_equal(fast.populations(), slow.populations())


@pytest.mark.parametrize("in_place", [False, True], ids=["two-buffers", "in-place"])
def test_numba_fixed_pressure_outlet_matches_reference(in_place):
    """A channel whose outlet holds no reference outflow: the kernels are compiled without the characteristic
    lookup (drho_w = 0) and give the reference's populations."""
    import dataclasses

    from hpcsolve.lbm.boundaries.outlet import characteristic_outlet

    setup = dataclasses.replace(channel(policy=FP64, characteristic=False), in_place=in_place)
    assert not characteristic_outlet(setup) and characteristic_outlet(channel(policy=FP64))
    ref, dev = _reference_and_numba(setup)
    # the fixed-pressure piece: drho_w = ZERO, no lookup of a reference outflow
    assert "own_uy, ZERO)" in dev.source and "outlet_density" not in dev.source
    assert rel_diff(shifted(dev), shifted(ref)) <= BOUND["fp64"]


@pytest.mark.parametrize("collision, precision, in_place, nx", [
    ("trt", FP64, False, 10), ("bgk", FP64, True, 10), ("trt", FP32, False, 13), ("trt", FP16S, False, 16),
    ("bgk", FP16C, False, 16)], ids=["trt-fp64", "bgk-fp64-in-place", "trt-fp32", "trt-fp16s-pairs", "bgk-fp16c-pairs"])
def test_numba_absorbing_layer_matches_reference(collision, precision, in_place, nx):
    """The absorbing layer's bulk relaxation (boundaries/layer.py) in every kind of step kernel (two buffers, in
    place, the 16-bit pair kernel) gives the reference's populations; and it changes them (more than 100x the
    bound) against the same run without the layer, so the comparison sees it."""
    import dataclasses

    base = dataclasses.replace(channel(nx=nx, collision=collision, policy=precision), in_place=in_place)
    setup = with_layer(base)
    ref, dev = _reference_and_numba(setup, pairs=True)      # the pair kernel where it applies (16-bit, even nx)
    assert "layer_coefficient" in dev.source
    assert dev.pairs == (precision in (FP16S, FP16C))
    assert rel_diff(shifted(dev), shifted(ref)) <= BOUND[precision.name]
    plain = get_stepper("numpy", base)
    plain.step(STEPS)
    assert rel_diff(shifted(ref), shifted(plain)) > 100 * BOUND[precision.name]


@pytest.mark.parametrize("pairs", [False, True])
def test_bench_check_runs_the_kernel_it_names(pairs):
    """``hpcsolve bench lbm`` checks each 16-bit kernel against the reference through ``get_stepper(...,
    pairs=...)``: the check runs the kernel it names, and its velocity error is the kernel's, within the bench's
    bound."""
    from hpcsolve.report import bench_lbm

    chk = bench_lbm.check_against_reference("numba-cuda", "fp16s", n=8, steps=STEPS, pairs=pairs)
    assert chk["pairs"] is pairs and chk["in_place"] is False and chk["finite"]
    assert 0 < chk["u_rel_l2"] <= bench_lbm._bound("fp16s")
