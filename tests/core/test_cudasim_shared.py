"""The CUDA simulator's ``cuda.shared.array`` made thread-safe (hpcsolve.core.cudasim): without the repair, a thread
switch between the simulator's look-up and store gave two threads of one block two different arrays, and the
FEM block sums added uninitialized memory (a refinement took 44 iterations instead of 32 on a loaded CI machine).
The tests force thread switches every microsecond, where the unrepaired simulator goes wrong in most launches."""

import sys

import numpy as np
import pytest
from numba import cuda, float64, int32     # module globals: the simulator swaps in its own cuda inside kernels

from hpcsolve.core import cudasim

pytestmark = pytest.mark.cudasim


@pytest.fixture
def frequent_switches():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def test_block_sums_exact_under_frequent_thread_switches(frequent_switches):
    """The FEM dot kernel's block tree (8 threads x 2 blocks under the simulator) on integers: every launch exact."""
    from hpcsolve.fem.linalg.kernels_numba import NumbaOps

    ops = NumbaOps()
    x = ops.to_device(np.arange(1, 41, dtype=np.float64))
    ws = ops.zeros(1, np.float64)
    exact = float(np.sum(np.arange(1, 41, dtype=np.float64) ** 2))        # 22,140: exact in float64
    sums = []
    for _ in range(200):    # unrepaired: 22 launches of 500 wrong (4.4 %), so >= 1 of 200 with probability 0.9999
        ops.fill_zero(ws)
        ops.dot(x, x, ws, 0)
        sums.append(float(ops.to_host(ws)[0]))
    assert sums == [exact] * 200


def test_the_repair_keeps_the_simulators_keys():
    """One array per allocating line and launch (as the simulator keys them), distinct lines distinct arrays."""
    assert cudasim.serialise_shared_arrays() is True
    out = np.zeros((16, 3), dtype=np.int64)

    @cuda.jit
    def k(out):
        a = cuda.shared.array(16, int32)
        b = cuda.shared.array(16, float64)
        t = cuda.threadIdx.x
        a[t] = t
        b[t] = 100.0 + t
        cuda.syncthreads()
        out[t, 0] = a[15 - t]           # another thread's value: the same array for the whole block
        out[t, 1] = int(b[15 - t])
        a2 = cuda.shared.array(16, int32)   # another line: another array
        a2[t] = -t
        cuda.syncthreads()
        out[t, 2] = a[t] + a2[t]

    k[1, 16](out)
    t = np.arange(16)
    assert out[:, 0].tolist() == (15 - t).tolist()
    assert out[:, 1].tolist() == (115 - t).tolist()
    assert out[:, 2].tolist() == [0] * 16
