"""A repair of the Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) that the Numba-CUDA kernels need.

The simulator runs each CUDA thread of a block as a Python thread. Its ``cuda.shared.array`` (numba-cuda
0.30, ``simulator/kernelapi.py: FakeCUDAShared.array``) finds a block's array by the caller's source line
with a look-up and a store that are not atomic::

    res = self._allocations.get(caller)
    if res is None:
        res = np.empty(shape, dtype)
        self._allocations[caller] = res

When the interpreter switches threads between the look-up and the store (it switches every 5 ms of
wall clock, so more often on a loaded machine), two threads of one block get two different arrays: a
thread's partial sum goes into an array the block's tree never reads, and the tree adds uninitialized
memory. Seen in hpcsolve's tests as a mixed-precision refinement taking 44 iterations instead of 32 on
a machine with 4 busy processes (1 run in 4); with ``sys.setswitchinterval(1e-6)`` 7 solves of 10 went
wrong (up to overflow), 0 of 10 with this repair.

``serialise_shared_arrays()`` replaces the method with one that does the same look-up and store under a
lock (same key, same arrays). It changes nothing on a GPU: it is applied only when the simulator is on,
by the modules that build Numba-CUDA kernels. Idempotent.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

_LOCK = threading.Lock()


def _np_dtype(dtype):
    from numba.core import types  # late: optional GPU module (numba), only where the simulator runs
    from numba.np import numpy_support  # late: optional GPU module (numba), as above

    return numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else np.dtype(dtype)


def serialise_shared_arrays() -> bool:
    """Make the simulator's ``cuda.shared.array`` thread-safe; True when the simulator's class was patched
    (now or before), False when the simulator does not import."""
    try:
        from numba.cuda.simulator import kernelapi  # late: optional GPU module; the simulator only when enabled
    except Exception:            # no simulator in this numba-cuda: nothing to repair
        return False
    cls = kernelapi.FakeCUDAShared
    if getattr(cls, "_hpcsolve_serialised", False):
        return True
    original = cls.array

    def array(self, shape, dtype, alignment=None):
        if shape == 0 or alignment is not None:      # dynamic shared memory (one buffer), or the simulator's error
            return original(self, shape, dtype, alignment)
        frame = sys._getframe(1)
        caller = (frame.f_code.co_filename, frame.f_lineno)     # the simulator's key: the allocating line
        with _LOCK:
            res = self._allocations.get(caller)
            if res is None:
                res = self._allocations[caller] = np.empty(shape, _np_dtype(dtype))
        return res

    cls.array = array
    cls._hpcsolve_serialised = True
    return True
