"""GPU LBM kernels (CuPy, Numba-CUDA) against the NumPy reference on the device machine.

Every boundary rule (periodic wrap, wall, moving wall / inlet, outlet, obstacle) and both
collision models, after STEPS steps, compared on the shifted populations h = g / scale
(relative L2 over the whole grid):

- fp64 and fp32 against the NumPy reference of the same precision: differences come only from
  the GPU's FMA contraction and operation order, bounds BOUND below (fp64 ~1e-12 expected);
- fp16s against the NumPy fp16s reference (rounding to float16 may differ by one unit in the
  last place where an FMA moved a value across a rounding boundary) and against fp64 (the
  precision cost itself, with its measured bound).

Observables computed on the device (macroscopic fields, momentum-exchange force) are checked
against the reference functions on the same state. Skipped with the reason where no GPU answers.
"""

import numpy as np
import pytest

from hpcsolve.lbm.kernels.emit_cuda import kernel_source
from hpcsolve.lbm.boundaries.force import momentum_exchange_force
from hpcsolve.lbm.steppers.stepper import get_stepper, macroscopic_from_populations
from hpcsolve.core.precision import FP16C, FP16S, FP32, FP64

from lbm_gpu_cases import GEOMETRIES, channel, obstacle_mask, rel_diff, shifted, with_layer

STEPS = 200
SIZE = {"channel": (48, 24), "periodic_couette": (40, 20), "fully_periodic": (32, 24)}
# relative L2 of the shifted populations against the reference of the same precision; seen on the
# H200 (both backends, all geometries and collisions): fp64 4.2e-16..1.2e-15, fp32 2.3e-7..1.0e-6,
# fp16s 4.7e-4..1.0e-3
BOUND = {"fp64": 1e-12, "fp32": 1e-5, "fp16s": 2e-3, "fp16c": 2e-3}   # fp16c: not yet run on a GPU
# fp16s against the fp64 reference (the cost of 16-bit storage after STEPS steps): seen 3.8e-4..8.7e-4
FP16S_VS_FP64 = 2e-3

GPU_BACKENDS = ["cupy", "numba-cuda"]


def _stepper_or_skip(backend, setup, **options):
    """The ``backend`` stepper of ``setup`` (with the stepper's ``options``, else as ``get_stepper`` makes it),
    or a skip where the backend cannot run here."""
    from hpcsolve.core import backends

    status = backends.probe(backend)
    if not status.available or status.simulator:
        pytest.skip(f"{backend}: {status.reason}")
    if not options:
        return get_stepper(backend, setup)
    if backend == "cupy":
        from hpcsolve.lbm.steppers.kernels_cupy import CupyStepper as S
    else:
        from hpcsolve.lbm.steppers.kernels_numba import NumbaCudaStepper as S
    return S(setup, **options)


def _setup(geometry, collision, policy):
    nx, ny = SIZE[geometry]
    return GEOMETRIES[geometry](nx=nx, ny=ny, collision=collision, policy=policy)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", [FP64, FP32, FP16S, FP16C], ids=lambda p: p.name)
@pytest.mark.parametrize("collision", ["bgk", "trt"])
@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_matches_reference(backend, geometry, collision, precision, record_property):
    setup = _setup(geometry, collision, precision)
    dev = _stepper_or_skip(backend, setup)
    ref = get_stepper("numpy", setup)
    ref.step(STEPS)
    dev.step(STEPS)
    h_ref, h_dev = shifted(ref), shifted(dev)
    assert np.abs(h_ref).max() > 1e-4          # the state is not at rest
    err = rel_diff(h_dev, h_ref)
    record_property("rel_l2_vs_reference", err)
    print(f"\nERR {backend} {geometry} {collision} {precision.name} vs numpy-{precision.name}: {err:.3e}")
    assert err <= BOUND[precision.name], err
    assert dev.finite()
    if precision is FP16S:
        ref64 = get_stepper("numpy", _setup(geometry, collision, FP64))
        ref64.step(STEPS)
        err64 = rel_diff(h_dev, shifted(ref64))
        print(f"ERR {backend} {geometry} {collision} fp16s vs numpy-fp64: {err64:.3e}")
        assert err64 <= FP16S_VS_FP64, err64


@pytest.mark.gpu
@pytest.mark.parametrize("precision", [FP64, FP32], ids=lambda p: p.name)
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_observables_match_reference(backend, precision):
    setup = channel(nx=48, ny=24, collision="trt", policy=precision)
    dev = _stepper_or_skip(backend, setup)
    dev.step(50)
    g = dev.populations()
    tol = 1e-14 if precision is FP64 else 1e-6
    for a, b in zip(dev.macroscopic(), macroscopic_from_populations(g, setup)):
        assert rel_diff(a, b) <= tol
    mask = obstacle_mask(setup)
    f_ref = momentum_exchange_force(g, setup, mask)
    f_dev = dev.force(mask)
    print(f"\nFORCE {backend} {precision.name}: device {f_dev} reference {f_ref}")
    assert abs(f_ref[0]) > 1e-6
    assert np.allclose(f_dev, f_ref, rtol=1e-10, atol=1e-14)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", [FP64, FP32, FP16S], ids=lambda p: p.name)
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_smooth_start_matches_reference(backend, precision):
    """Boundary velocities ramped over setup.ramp_steps on the device, then full, as in the reference."""
    setup = channel(nx=48, ny=24, collision="trt", policy=precision)
    setup.ramp_steps = STEPS // 2
    dev = _stepper_or_skip(backend, setup)
    ref = get_stepper("numpy", setup)
    for n in (1, STEPS // 2 - 1, STEPS // 2):   # inside the ramp, to its end, past it
        ref.step(n)
        dev.step(n)
        err = rel_diff(shifted(dev), shifted(ref))
        print(f"\nERR {backend} ramp {precision.name} step {ref.time_step}: {err:.3e}")
        assert err <= BOUND[precision.name], err


@pytest.mark.gpu
@pytest.mark.parametrize("precision", [FP64, FP32, FP16S], ids=lambda p: p.name)
@pytest.mark.parametrize("geometry", sorted(GEOMETRIES) + ["bouzidi"])
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_in_place_matches_reference(backend, geometry, precision):
    """In-place streaming (one array, AA pattern): after an odd (odd layout) and an even number of
    steps the populations and moments agree with the reference as the two-buffer kernels do, and the
    device force equals the host force on the same state."""
    from lbm_gpu_cases import channel_with_bouzidi

    if geometry == "bouzidi":
        setup = channel_with_bouzidi(nx=48, ny=24, collision="trt", policy=precision)
    else:
        setup = _setup(geometry, "trt", precision)
    setup.in_place = True
    dev = _stepper_or_skip(backend, setup)
    ref = get_stepper("numpy", setup)
    assert dev.in_place and dev.b is None
    for n in (STEPS + 1, 1):
        ref.step(n)
        dev.step(n)
        err = rel_diff(shifted(dev), shifted(ref))
        print(f"\nERR {backend} in-place {geometry} {precision.name} step {ref.time_step} parity {dev.parity}: {err:.3e}")
        assert err <= BOUND[precision.name], err
        for a, b in zip(dev.macroscopic(), macroscopic_from_populations(dev.populations(), setup)):
            assert rel_diff(a, b) <= (1e-14 if precision is FP64 else 1e-6)
        if geometry in ("channel", "bouzidi"):
            mask = obstacle_mask(setup)
            f_host = momentum_exchange_force(dev.populations(), setup, mask)
            assert np.allclose(dev.force(mask), f_host, rtol=1e-10, atol=1e-14), (dev.force(mask), f_host)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_in_place_restart_at_odd_parity(backend):
    """populations() at an odd step count (odd layout) loaded into a fresh in-place stepper (what a
    checkpoint restart does) continues as the reference: outlet table and both Bouzidi pre-passes."""
    from lbm_gpu_cases import channel_with_bouzidi

    setup = channel_with_bouzidi(nx=48, ny=24, collision="trt", policy=FP64)
    setup.in_place = True
    first = _stepper_or_skip(backend, setup)
    ref = get_stepper("numpy", setup)
    first.step(11)
    ref.step(11)
    again = get_stepper(backend, setup)
    again.load_populations(first.populations(), first.time_step)
    again.step(9)
    ref.step(9)
    err = rel_diff(shifted(again), shifted(ref))
    print(f"\nERR {backend} in-place restart at step 11: {err:.3e}")
    assert again.time_step == 20 and err <= BOUND["fp64"]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_in_place_case_run_matches_two_buffers(backend):
    """The runner with lattice.streaming = 'in-place' (monitor points at both layouts, smooth start,
    Bouzidi cylinder, outlet) gives the two-buffer run's drag and lift."""
    from pathlib import Path

    from hpcsolve.run import run_case

    case = Path(__file__).resolve().parents[2] / "cases" / "cylinder_2d1.toml"
    base = ["lattice.resolution=10", "time.steps=401", "time.monitor_interval=25", "boundaries.ramp_time=0.5",
            "steady.enabled=false"]
    _stepper_or_skip(backend, channel(policy=FP64))
    r2 = run_case(case, backend, "fp64", overrides=base, progress=False)
    r1 = run_case(case, backend, "fp64", overrides=base + ["lattice.streaming=in-place"], progress=False)
    assert r1.derived["streaming"] == "in-place" and r2.derived["streaming"] == "two-buffer"
    for key in ("drag_coefficient", "lift_coefficient"):
        print(f"\n{backend} {key}: in place {r1.metrics[key]!r} two buffers {r2.metrics[key]!r}")
        assert r1.metrics[key] == pytest.approx(r2.metrics[key], rel=1e-10, abs=1e-13)
        assert np.allclose(r1.series[key], r2.series[key], rtol=1e-10, atol=1e-13)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_auto_streaming_follows_the_device_cache_and_matches_two_buffers(backend):
    """lattice.streaming = 'auto' (in_place None): a fp32 cavity whose one-array lattice takes half of this
    device's L2 cache streams in place and gives the two-buffer populations; a 64^2 one keeps two buffers."""
    import math

    from hpcsolve.lbm.steppers import kernels_cupy, kernels_numba
    from hpcsolve.lbm.steppers.gpu_common import bytes_per_cell
    from hpcsolve.report.bench_lbm import cavity_setup

    _stepper_or_skip(backend, channel(policy=FP32))
    if backend == "cupy":
        import cupy

        l2 = kernels_cupy.l2_cache_bytes(cupy)
    else:
        from numba import cuda

        l2 = kernels_numba.l2_cache_bytes(cuda)
    assert l2 >= 1024**2, l2
    n = math.isqrt(int(0.5 * l2) // bytes_per_cell(FP32, True)[1])
    auto = get_stepper(backend, cavity_setup(n, FP32, in_place=None))
    two = get_stepper(backend, cavity_setup(n, FP32, in_place=False))
    assert auto.in_place and auto.b is None and not two.in_place
    for st in (auto, two):
        st.perturb(1e-3, seed=5)
        st.step(7)                      # odd: the in-place state ends in the odd layout
    h_auto, h_two = auto.populations(), two.populations()
    diff = float(np.abs(h_auto - h_two).max() / np.abs(h_two).max())
    print(f"\n{backend} auto streaming at {n}^2 (L2 {l2:,} B): in place, max diff to two buffers {diff:.2e}")
    assert diff <= 1e-6
    assert not get_stepper(backend, cavity_setup(64, FP32, in_place=None)).in_place


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_monitor_points_on_the_device_match_the_host(backend, monkeypatch):
    """Monitor points reduce on the device and come back to the host in batches (hpcsolve/lbm/device_monitor.py), or
    one point at a time on the device (scalars back), or from host copies: the series, the steady stop and the fields
    of the three paths are equal, to float64 summation order. Each path must be the one taken."""
    from pathlib import Path

    from hpcsolve.lbm import runner as lbm_runner
    from hpcsolve.run import run_case

    case = Path(__file__).resolve().parents[2] / "cases" / "cylinder_2d1.toml"
    over = ["lattice.resolution=10", "time.end_time=12", "time.monitor_interval=25", "boundaries.ramp_time=0.5",
            "steady.interval=200", "steady.tolerance=2e-2"]
    _stepper_or_skip(backend, channel(policy=FP64))
    used, batched = [], []
    real_points, real_batched = lbm_runner.point_fields, lbm_runner.batched_points

    def spy_batched(*args, **kwargs):
        out = real_batched(*args, **kwargs)
        batched.append(out is not None)
        return out

    monkeypatch.setattr(lbm_runner, "batched_points", spy_batched)
    runs = {"batched": run_case(case, backend, "fp64", overrides=over, progress=False, plots=False)}
    assert batched == [True]
    monkeypatch.setattr(lbm_runner, "batched_points", lambda *a, **k: None)

    def spy(stepper, *args):
        out = real_points(stepper, *args)
        used.append(type(out[0]).__module__.split(".")[0])
        return out

    monkeypatch.setattr(lbm_runner, "point_fields", spy)
    runs["device"] = run_case(case, backend, "fp64", overrides=over, progress=False, plots=False)
    assert set(used) == {"cupy"}

    def host_only(stepper, *args):
        out = stepper.macroscopic()
        used.append(type(out[0]).__module__.split(".")[0])
        return out

    monkeypatch.setattr(lbm_runner, "point_fields", host_only)
    used.clear()
    host = run_case(case, backend, "fp64", overrides=over, progress=False, plots=False)
    assert set(used) == {"numpy"}
    for path, dev in runs.items():
        _same_run(path, dev, host)


def _same_run(path, dev, host):
    """``dev`` (a device path's run) equals ``host`` (host copies) to float64 summation order."""
    assert dev.status == host.status and dev.metrics["steps"] == host.metrics["steps"]
    for key in ("kinetic_energy", "max_speed", "steady_change", "drag_coefficient", "lift_coefficient"):
        a, b = dev.series[key], host.series[key]
        fin = np.isfinite(b)
        print(f"\n{path} {key}: max relative difference "
              f"{np.max(np.abs(a[fin] - b[fin]) / np.maximum(np.abs(b[fin]), 1e-300)):.2e}")
        assert np.array_equal(np.isfinite(a), fin)
        # the force coefficients: the device force (lbm_force) sums with float64 atomics, in an order that changes from run
        # to run (on the H200: the drag at rest +-8.9e-15, the lift 1.11e-14 against 8.88e-15), so an absolute
        # 1e-12 on coefficients of order 0.01-5; the other series relative 1e-12
        atol = 1e-12 if key.endswith("coefficient") else 0.0
        assert np.allclose(a[fin], b[fin], rtol=1e-12, atol=atol)
    for name in ("velocity", "pressure", "vorticity"):
        assert np.array_equal(dev.fields[name], host.fields[name])


@pytest.mark.gpu
def test_fp64_tight_agreement_on_larger_grid():
    """The ~1e-12 claim on a grid of many warps and rows (block edges, wrap across blocks)."""
    setup = GEOMETRIES["channel"](nx=300, ny=70, collision="bgk", policy=FP64)
    ref = get_stepper("numpy", setup)
    ref.step(100)
    for backend in GPU_BACKENDS:
        dev = _stepper_or_skip(backend, setup)
        dev.step(100)
        err = rel_diff(shifted(dev), shifted(ref))
        print(f"\nERR {backend} channel-300x70 bgk fp64: {err:.3e}")
        assert err <= 1e-12


def test_kernel_source_has_no_retyped_lattice_constant():
    """CPU check of the generated CUDA C: weights appear only as literals traced from physics.py
    (their exact float32/float64 values), each direction is loaded and stored once."""
    src = kernel_source(FP32, "bgk")
    assert all(src.count(f"out[{i}] = ") == 1 for i in range(9))   # collide_values: each direction once
    assert src.count("store_pop(") == 1 + 1             # the helper's definition + collide_store's loop
    assert "lbm_step_pair" not in src                   # the pair kernel exists for 16-bit storage only
    assert "0.1111111119389534f" in src               # float32(1/9), traced from physics_for(float32)
    assert "0.1111111111111111" not in src.replace("0.1111111119389534", "")
    src16 = kernel_source(FP16S, "trt")
    assert "__float2half_rn" in src16 and "0.00390625f" in src16
    assert src16.count("__floats2half2_rn(") == 9      # lbm_step_pair: one packed store per population
    assert src16.count("__shfl_up_sync(") == 3 and src16.count("__shfl_down_sync(") == 3   # c_x = +1 / -1
    src16c = kernel_source(FP16C, "trt")                # FP16C: the pair kernel packs two codes per word,
    assert src16c.count("fp16c_pack_sr(") == 9 + 1 and "__half" not in src16c     # rounded stochastically
    # the per-cell stores too: one seed per cell (collide_store), one stochastic store per direction
    assert src16c.count("fp16c_seed(hh[0]") == 1 and src16c.count("fp16c_encode_sr(o[") == 9


def test_numba_step_source_indexes_without_wraparound():
    """CPU check of the generated Numba kernels: populations, words and the shared-memory exchange are
    read and written through load_at / store_at only (a plain subscript would bring back Numba's
    negative-index wraparound, 16 % of the fp16s pair kernel's speed on the H200)."""
    import re

    from hpcsolve.lbm.kernels import kernel_plan
    from hpcsolve.lbm.kernels import emit_numba as kn
    from hpcsolve.lbm.boundaries import link_rules
    from hpcsolve.lbm.kernels.population_code import numba_code

    code = numba_code(FP16S)
    steps = {layout: kn._pull_python(layout, link_rules(True), code) + kn._step_kernel_python(layout, "trt", code, 1, 128)
             for layout in (kernel_plan.TWO_BUFFER, kernel_plan.AA_EVEN, kernel_plan.AA_ODD)}
    pair = kn._pair_kernel_python("trt", code, 64, "smem")
    helpers = kn._helpers_python(code)
    for src in (*steps.values(), pair, helpers.split("def lbm_scale_velocity")[0]):   # step kernels, helpers
        assert not re.search(r"\b(A|B|AW|BW|xch)\[", src), src
    assert steps[kernel_plan.TWO_BUFFER].count("store_at(B, ") == 9
    assert all(steps[layout].count("store_at(A, ") == 9 for layout in kernel_plan.step_layouts(True))
    assert pair.count("load_at(AW, ") == 9 + 6           # one word per population + the 6 edge halves
    assert pair.count("store_at(BW, ") == 9              # one packed word per population
    assert pair.count("store_at(xch, ") == 6 and pair.count("load_at(xch, ") == 6


@pytest.mark.gpu
@pytest.mark.parametrize("precision, pairs", [(FP64, None), (FP32, None), (FP16S, None), (FP16S, True)],
                         ids=["fp64", "fp32", "fp16s", "fp16s-pairs"])
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_gpu_bouzidi_links_match_reference(backend, precision, pairs):
    """Interpolated bounce-back (the reference's pre-pass on the device before each step); 16-bit storage in
    the per-cell kernel (the default on a grid this small) and in the pair kernel's boundary path."""
    pytest.importorskip("hpcsolve.lbm.boundaries.bouzidi")
    from lbm_gpu_cases import channel_with_bouzidi

    setup = channel_with_bouzidi(nx=48, ny=24, collision="trt", policy=precision)
    dev = _stepper_or_skip(backend, setup, **({} if pairs is None else {"pairs": pairs}))
    assert dev.pairs == bool(pairs)
    ref = get_stepper("numpy", setup)
    ref.step(STEPS)
    dev.step(STEPS)
    err = rel_diff(shifted(dev), shifted(ref))
    print(f"\nERR {backend} channel+bouzidi trt {precision.name}: {err:.3e}")
    assert err <= BOUND[precision.name], err
    # drag and lift with interpolated links, reduced on the device, against the host reference on the same state
    from lbm_gpu_cases import obstacle_mask

    from hpcsolve.lbm.boundaries.force import momentum_exchange_force

    mask = obstacle_mask(setup)
    f_ref = momentum_exchange_force(dev.populations(), setup, mask)
    assert np.allclose(dev.force(mask), f_ref, rtol=1e-12, atol=1e-15), (dev.force(mask), f_ref)


PAIR_VARIANTS = [("cupy", {}), ("numba-cuda", {"exchange": "shfl"}), ("numba-cuda", {"exchange": "smem"})]


@pytest.mark.gpu
@pytest.mark.parametrize("collision", ["bgk", "trt"])
@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
@pytest.mark.parametrize("backend, options", PAIR_VARIANTS, ids=lambda v: v if isinstance(v, str) else v.get("exchange", ""))
@pytest.mark.parametrize("policy", [FP16S, FP16C], ids=lambda p: p.name)
def test_16bit_pair_kernel_matches_per_cell_kernel(backend, options, geometry, collision, policy):
    """The 16-bit two-cells-per-thread kernel (even nx: 32-bit words of two float16 or FP16C values,
    neighbour halves by shuffle or shared memory) against the per-cell kernel of the same backend and
    the NumPy reference of the policy. The two kernels evaluate the same float32 expressions; they may
    differ by one 16-bit unit where the compiler contracted differently, so the bound is far below
    the one against the reference."""
    from hpcsolve.lbm.steppers.kernels_cupy import CupyStepper
    from hpcsolve.lbm.steppers.kernels_numba import NumbaCudaStepper

    setup = _setup(geometry, collision, policy)
    _stepper_or_skip(backend, setup)
    cls = CupyStepper if backend == "cupy" else NumbaCudaStepper
    pair, cell = cls(setup, pairs=True, **options), cls(setup, pairs=False)
    assert pair.pairs and not cell.pairs
    ref = get_stepper("numpy", setup)
    for s in (pair, cell, ref):
        s.step(STEPS)
    same = float(np.mean(pair.populations().view(np.uint16) == cell.populations().view(np.uint16)))
    assert same > 0.99, same
    assert rel_diff(shifted(pair), shifted(cell)) <= 1e-4
    assert rel_diff(shifted(pair), shifted(ref)) <= BOUND[policy.name]


def _step_registers(stepper) -> list[int]:
    """Registers per thread of each compiled step kernel of a GPU stepper, as the driver reports them."""
    kernels = stepper._k_steps if stepper.backend == "cupy" else stepper._k_step
    out = []
    for k in kernels.values():
        regs = k.num_regs if stepper.backend == "cupy" else k.get_regs_per_thread()
        out += list(regs.values()) if isinstance(regs, dict) else [int(regs)]
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["two-buffer fp32", "in-place fp32", "fp16s pairs", "fp16c per cell"])
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_register_cap_reaches_the_step_kernels(backend, variant):
    """``max_registers`` caps every step kernel (CuPy: the kernels' ``__maxnreg__``; ptxas ignored the
    ``--maxrregcount`` option CuPy used to pass, because the kernels have launch bounds) and changes nothing
    but the register allocation: the capped steps equal the uncapped ones."""
    CAP = 24      # sm_90's smallest: ptxas raises a lower cap to 24 (seen with nvcc 13)
    precision = {"fp32": FP32, "fp16s": FP16S, "fp16c": FP16C}[next(w for w in variant.split() if w.startswith("fp"))]
    setup = _setup("channel", "trt", precision)
    setup.in_place = variant.startswith("in-place")
    options = {"pairs": variant.endswith("pairs")} if precision.storage_bytes == 2 else {}
    free = _stepper_or_skip(backend, setup, **options)
    capped = _stepper_or_skip(backend, setup, max_registers=CAP, **options)
    assert capped.in_place == setup.in_place and capped.pairs == free.pairs
    for s in (free, capped):
        s.step(STEPS + 1)
    regs_free, regs_capped = _step_registers(free), _step_registers(capped)
    print(f"\nREGS {backend} {variant}: {regs_free} -> {regs_capped}")
    assert regs_capped and max(regs_capped) <= CAP, regs_capped
    assert min(regs_free) > CAP, regs_free      # else the cap would test nothing
    a, b = free.populations(), capped.populations()
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), rel_diff(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_fp16s_odd_nx_uses_per_cell_kernel(backend):
    setup = GEOMETRIES["channel"](nx=47, ny=24, collision="trt", policy=FP16S)
    dev = _stepper_or_skip(backend, setup)
    assert not dev.pairs
    ref = get_stepper("numpy", setup)
    dev.step(STEPS)
    ref.step(STEPS)
    assert rel_diff(shifted(dev), shifted(ref)) <= BOUND["fp16s"]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["two-buffer fp32 bouzidi", "in-place fp64 bouzidi", "fp16s pairs"])
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_steps_replayed_as_cuda_graphs_equal_steps_launched_one_by_one(backend, variant):
    """Bitwise: runs of steps recorded as CUDA graphs (every run length, both buffer orders / parities, recorded
    at the second use and replayed after) against the same steps launched from Python."""
    import dataclasses

    from lbm_gpu_cases import channel_with_bouzidi

    policy = {"two-buffer fp32 bouzidi": FP32, "in-place fp64 bouzidi": FP64, "fp16s pairs": FP16S}[variant]
    setup = (channel_with_bouzidi(nx=48, ny=24, collision="trt", policy=policy) if "bouzidi" in variant
             else _setup("channel", "trt", policy))
    if "in-place" in variant:
        setup = dataclasses.replace(setup, in_place=True)
    _stepper_or_skip(backend, setup)
    if backend == "cupy":
        from hpcsolve.lbm.steppers.kernels_cupy import CupyStepper as S
    else:
        from hpcsolve.lbm.steppers.kernels_numba import NumbaCudaStepper as S
    options = {"pairs": True} if "pairs" in variant else {}
    fast, slow = S(setup, **options), S(setup, graphs=False, **options)
    assert fast.pairs == slow.pairs == ("pairs" in variant)
    for st in (fast, slow):
        st.step(1)                     # odd: the graphs start from the swapped buffers / odd parity
        for _ in range(5):             # 127 = 64 + 32 + 16 + 8 + 4 + 2 + 1, odd: the calls alternate between two
            st.step(127)               # starting states; per state: directly, then recorded, then replayed
    assert fast.graphs.enabled and fast.graphs.error is None, fast.graphs.error
    assert sum(1 for _, replay in fast.graphs._cache.values() if replay is not None) == 12
    assert np.array_equal(fast.populations(), slow.populations())


@pytest.mark.gpu
@pytest.mark.parametrize("in_place", [False, True], ids=["two-buffers", "in-place"])
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_fixed_pressure_outlet_kernels_match_reference(backend, in_place):
    """A channel whose outlet holds no reference outflow: kernels compiled without the characteristic lookup
    (drho_w = 0) against the NumPy reference, fp64."""
    import dataclasses

    setup = dataclasses.replace(channel(nx=48, ny=24, policy=FP64, characteristic=False), in_place=in_place)
    dev = _stepper_or_skip(backend, setup)
    ref = get_stepper("numpy", setup)
    ref.step(STEPS)
    dev.step(STEPS)
    assert "urx" not in dev.source
    assert rel_diff(shifted(dev), shifted(ref)) <= BOUND["fp64"]


@pytest.mark.gpu
@pytest.mark.parametrize("collision, precision, in_place", [
    ("trt", FP64, False), ("bgk", FP64, True), ("trt", FP32, False), ("trt", FP32, True), ("trt", FP16S, False),
    ("bgk", FP16C, False)], ids=["trt-fp64", "bgk-fp64-in-place", "trt-fp32", "trt-fp32-in-place",
                                 "trt-fp16s-pairs", "bgk-fp16c-pairs"])
@pytest.mark.parametrize("backend", GPU_BACKENDS)
def test_absorbing_layer_kernels_match_reference(backend, collision, precision, in_place):
    """The absorbing layer's bulk relaxation (boundaries/layer.py) in the two-buffer, in-place and 16-bit pair
    kernels against the NumPy reference; the layer changes the state far more than the bound."""
    import dataclasses

    base = dataclasses.replace(channel(nx=48, ny=24, collision=collision, policy=precision), in_place=in_place)
    setup = with_layer(base)
    dev = _stepper_or_skip(backend, setup, pairs=True)      # the pair kernel where it applies (16-bit, two buffers)
    ref = get_stepper("numpy", setup)
    plain = get_stepper("numpy", base)
    for s in (dev, ref, plain):
        s.step(STEPS)
    assert "layer_coefficient" in dev.source
    assert dev.pairs == (precision in (FP16S, FP16C) and not in_place)
    err = rel_diff(shifted(dev), shifted(ref))
    print(f"\nERR {backend} layer {collision} {precision.name} in_place={in_place}: {err:.3e}")
    assert err <= BOUND[precision.name], err
    assert rel_diff(shifted(ref), shifted(plain)) > 10 * BOUND[precision.name]
