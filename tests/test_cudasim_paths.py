"""Numba-CUDA paths under the CUDA simulator that the other simulator tests do not run (issue 36).

- FEM ops that no simulator test launched: ``axpy`` (every pair of vector types) and ``precondition``, against
  the NumPy reference ops (hpcsolve.fem.linalg.kernels_numpy_low) on the same inputs; the matrix check's out-of-range
  column index, counted as the NumPy check counts it.
- The 16-bit pair kernel's warp-shuffle exchange (``exchange="shfl"``): the simulator has no warp shuffles, so the
  stepper takes the shared-memory exchange there. Here ``cuda.shfl_up_sync`` / ``shfl_down_sync`` get a stand-in
  with the hardware's semantics for a full mask (lane L reads lane L -+ 1 of its warp of 32, the warp's first /
  last lane its own value), built on the simulator's barrier, and the stepper is built as on a GPU for the exchange
  only. The shuffle kernel must give the shared-memory kernel's populations bit for bit, and the reference's
  within the policy's bound, on a grid with two blocks, a warp edge inside a block and a partly used block.

What cannot run under the simulator, and why (docs/design/ci_gpu_coverage.md has the list with the line counts):

- LLVM intrinsics (``numba.cuda.extending.intrinsic``: ``kernels_numba._half_bits`` / ``_raw_access``, the FP16C
  codec's ``fp16c.numba_functions`` / ``numba_pair_functions`` / ``numba_stochastic_functions``): the simulator runs
  the kernel's Python, never Numba's code generator, so those modules give NumPy stand-ins there (tests/core/test_fp16c.py
  checks the stand-ins and the C codec against the NumPy reference bit for bit);
- CUDA graphs (``_launch_stream`` with CuPy streams, ``NumbaOps.capture``): no streams to capture; their recording
  logic runs with a stand-in capture (tests/lbm/test_cudasim_lbm.py::test_recorded_steps_after_perturb...);
- ``max_registers`` and ``launch_bounds``: compile options the simulator does not take;
- the device-side monitor fields (``fields_on_device``): they hand the moments to CuPy.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from hpcsolve.lbm.steppers.stepper import get_stepper
from hpcsolve.core.precision import FP16C, FP16S

sys.path.insert(0, str(Path(__file__).parent / "lbm"))       # the LBM test geometries (tests/lbm/lbm_gpu_cases.py)
from lbm_gpu_cases import channel, rel_diff, shifted, with_layer  # noqa: E402

pytestmark = pytest.mark.cudasim

STEPS = 2


def _warp_shuffle(direction: int):
    """``cuda.shfl_up_sync`` (direction -1) / ``shfl_down_sync`` (+1) for the simulator, full mask: every thread of
    the block posts its value, waits at the block's barrier, reads lane L + direction * delta of its own warp (its
    own value past the warp's edge or past the block's last thread), and waits again before the next exchange
    reuses the board. Every thread of the block must call it (as every lane of a warp must on the GPU)."""
    def shfl(self, mask, value, delta):
        assert mask in (-1, 0xFFFFFFFF), "full-mask shuffles only"
        t = threading.current_thread()
        board = t._manager.__dict__.setdefault("_shfl_board", {})
        board[t.thread_id] = value
        t.syncthreads()
        lane = (t.thread_id & 31) + direction * delta
        out = board.get(t.thread_id + direction * delta, value) if 0 <= lane < 32 else value
        t.syncthreads()
        return out
    return shfl


@pytest.fixture
def shuffles(monkeypatch):
    """The simulator's kernel-side cuda module with warp shuffles (this test only)."""
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    monkeypatch.setattr(FakeCUDAModule, "shfl_up_sync", _warp_shuffle(-1), raising=False)
    monkeypatch.setattr(FakeCUDAModule, "shfl_down_sync", _warp_shuffle(+1), raising=False)


def _shuffle_stepper(setup, monkeypatch, **options):
    """``NumbaCudaStepper(setup, pairs=True, exchange="shfl")`` with the exchange the stepper would use on a GPU:
    ``compiled_kernels`` forces the shared-memory exchange under the simulator, so it is told it is not in one
    while the stepper is built. The device helpers it also asks that question (the float16 / FP16C word functions,
    raw array access) are taken first, so that their simulator versions are the ones cached and used."""
    from hpcsolve.core import backends, fp16c
    from hpcsolve.lbm.steppers import kernels_numba

    kernels_numba._half_bits()
    kernels_numba._raw_access()
    fp16c.numba_functions()
    fp16c.numba_pair_functions()
    fp16c.numba_stochastic_functions()
    with monkeypatch.context() as m:
        m.setattr(backends, "cuda_simulator_enabled", lambda: False)
        st = kernels_numba.NumbaCudaStepper(setup, pairs=True, exchange="shfl", graphs=False, **options)
    # the stepper holds its kernels; the cache must not hand the shuffle kernels to a later stepper of this process
    # (under the simulator it asks for "smem" anyway, but a "shfl" request would now get them without a stand-in)
    kernels_numba.compiled_kernels.cache_clear()
    assert "cuda.shfl_up_sync" in st.source, "the shuffle exchange was not emitted"
    assert "cuda.shfl_down_sync" in st.source and "xch = cuda.shared.array" not in st.source
    return st


@pytest.mark.parametrize("policy, collision, layer", [(FP16S, "trt", False), (FP16C, "bgk", True)],
                         ids=["fp16s-trt", "fp16c-bgk-layer"])
def test_pair_kernel_warp_shuffle_exchange_matches_shared_memory_and_reference(shuffles, monkeypatch, policy,
                                                                                collision, layer):
    """nx = 136: 68 pairs, block 64 (two warps): block 0 has a warp edge at lane 31 / 32 inside it, block 1 four
    active pairs and 60 clamped ones; the pair at the periodic wrap loads its neighbour itself. Only pairs of two
    fluid cells without a non-fluid neighbour take the exchanged words (the others the per-cell path): rows 2 and 3
    of the 6 are such pairs, on both sides of the warp edge and of the block edge."""
    from hpcsolve.lbm.flags import FLUID
    from hpcsolve.lbm.steppers.gpu_common import device_flags
    from hpcsolve.lbm.steppers.kernels_numba import NumbaCudaStepper

    base = channel(nx=136, ny=6, collision=collision, policy=policy)
    setup = with_layer(base) if layer else base
    codes = device_flags(setup.flags)
    fast = (codes[:, 0::2] == FLUID) & (codes[:, 1::2] == FLUID)     # (row, pair): the exchange path
    assert fast[2:4, [30, 31, 32, 62, 63, 64, 65]].all() and fast.sum() > 100     # warp edge 31/32, block edge 63/64
    shfl = _shuffle_stepper(setup, monkeypatch, block_x=64)
    smem = NumbaCudaStepper(setup, pairs=True, exchange="smem", block_x=64, graphs=False)
    ref = get_stepper("numpy", setup)
    assert shfl.pairs and smem.pairs and shfl.block_x == smem.block_x == 64
    assert "xch = cuda.shared.array" in smem.source and "shfl" not in smem.source
    for s in (shfl, smem, ref):
        s.step(STEPS)
    g_shfl, g_smem = shfl.populations(), smem.populations()
    assert np.abs(shifted(ref)).max() > 1e-3                    # the state moved
    assert np.array_equal(g_shfl.view(np.uint16), g_smem.view(np.uint16))
    assert rel_diff(shifted(shfl), shifted(ref)) <= 1e-3


cuda = None      # numba.cuda, set by _probe_kernel: a module global, which the simulator swaps for its own module


def _probe_kernel():
    global cuda
    from numba import cuda as numba_cuda

    cuda = numba_cuda

    def probe(up, down):
        t = cuda.threadIdx.x
        up[t] = cuda.shfl_up_sync(-1, t * 10, 1)
        down[t] = cuda.shfl_down_sync(-1, t * 10, 1)
    return numba_cuda.jit(probe)


def test_the_shuffle_stand_in_is_a_warp_shuffle(shuffles):
    """The stand-in itself: lane L gets lane L - 1 (up) / L + 1 (down) within each warp of 32, the edge lanes
    their own value, on a 80-thread block (two full warps and a partial one)."""
    up, down = np.zeros(80, np.int64), np.zeros(80, np.int64)
    _probe_kernel()[1, 80](up, down)
    lane = np.arange(80) % 32
    t = np.arange(80)
    np.testing.assert_array_equal(up, np.where(lane == 0, t, t - 1) * 10)
    np.testing.assert_array_equal(down, np.where((lane == 31) | (t == 79), t, t + 1) * 10)


# -- FEM ops ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fem_ops():
    from hpcsolve.fem.linalg import kernels_numba, kernels_numpy_low

    return kernels_numba.low_ops(), kernels_numpy_low.low_ops()


def _both(ops, fn):
    """``fn(op)`` on the simulator's NumbaOps and on the NumPy reference ops; each result copied to the host."""
    return [[low.to_host(a) if not isinstance(a, np.ndarray) else a for a in fn(low)] for low in ops]


@pytest.mark.parametrize("tx, ty", [(np.float32, np.float32), (np.float32, np.float64), (np.float64, np.float32),
                                    (np.float64, np.float64)], ids=["f32-f32", "f32-f64", "f64-f32", "f64-f64"])
@pytest.mark.parametrize("coef", [(0, 1, -1.5), (0, -1, 0.5), (-1, -1, 2.0), (0, 2, 1.0)],
                         ids=["ratio", "scaled", "constant", "divide-by-zero"])
def test_numba_axpy_matches_numpy(fem_ops, tx, ty, coef):
    """y += (c ws[inum] / ws[iden]) x in y's type, x widened or narrowed to it (``lowops``: x / 0 -> 0); 300
    entries: two blocks' grid stride under the simulator."""
    rng = np.random.default_rng(5)
    x0, y0 = rng.standard_normal(300).astype(tx), rng.standard_normal(300).astype(ty)
    ws0 = np.array([3.0, -0.75, 0.0, 0.0])

    def run(low):
        x, y, ws = low.to_device(x0), low.to_device(y0), low.to_device(ws0)
        low.axpy(coef, x, y, ws)
        low.sync()
        return (y,)

    (got,), (want,) = _both(fem_ops, run)
    assert got.dtype == want.dtype == np.dtype(ty)
    assert not np.array_equal(want, y0) or coef == (0, 2, 1.0)      # it moved (but for the division by zero)
    if coef == (0, 2, 1.0):
        np.testing.assert_array_equal(got, y0)
    np.testing.assert_allclose(got, want, rtol=1e-6 if ty == np.float32 else 1e-15, atol=0)


@pytest.mark.parametrize("t", [np.float32, np.float64], ids=["f32", "f64"])
def test_numba_precondition_matches_numpy(fem_ops, t):
    """z = D^-1 r and ws[i] += r.z (products in T, the sum in float64)."""
    rng = np.random.default_rng(6)
    r0, d0 = rng.standard_normal(300).astype(t), rng.uniform(0.5, 2.0, 300).astype(t)

    def run(low):
        r, dinv, z, ws = low.to_device(r0), low.to_device(d0), low.zeros(300, t), low.zeros(3, np.float64)
        low.precondition(dinv, r, z, ws, 1)
        low.sync()
        return z, ws

    (z, ws), (z_ref, ws_ref) = _both(fem_ops, run)
    np.testing.assert_array_equal(z, z_ref)                      # one product per entry: the same rounding
    assert ws_ref[1] > 0 and ws[0] == ws[2] == 0
    assert ws[1] == pytest.approx(ws_ref[1], rel=1e-6 if t == np.float32 else 1e-13)


def test_numba_check_kernel_counts_column_indices_out_of_range(fem_ops):
    """A column index past the last column and a negative one: the Numba check counts both, as NumPy's does, and no
    non-finite value (nothing else is decided on a matrix with bad indices: NumPy's check stops there)."""
    import scipy.sparse as sp

    from hpcsolve.fem.linalg import lowops

    n = 12
    A = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    A.sort_indices()
    indices = A.indices.astype(np.int32)
    indices[A.indptr[4] + 2] = n + 3                 # row 4's last entry: a column past the end
    indices[A.indptr[9]] = -2                        # row 9's first entry: a negative column

    def run(low):
        ws, dinv = low.zeros(lowops.CHECK_SLOTS, np.float64), low.zeros(n, np.float64)
        dev = [low.to_device(a) for a in (A.indptr.astype(np.int32), indices, A.data)]
        low.check_matrix(n, *dev, dinv, ws, 0)
        low.sync()
        return ws, dinv

    (ws, _), (ws_ref, _) = _both(fem_ops, run)
    assert ws_ref[lowops.CHECK_BAD_INDEX] == 2
    assert ws[lowops.CHECK_BAD_INDEX] == 2 and ws[lowops.CHECK_NONFINITE] == ws_ref[lowops.CHECK_NONFINITE] == 0
