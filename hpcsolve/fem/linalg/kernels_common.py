"""What the two GPU backends of the FEM low ops share (``kernels_cupy``, ``kernels_numba``), so that neither imports
the other: the block size and the grid cap their launches assume, the recording of a block of launches into a CUDA
graph with CuPy's stream capture (both backends capture that way: Numba-CUDA launches on a CuPy stream where CuPy
imports), and the low ops of another backend on a given stream, found through the backend registry
(``Backend.piece("fem.low_ops")``), not by import (Numba-CUDA's set-up twin: CuPy's kernels on Numba's CuPy stream,
``NumbaOps.launch_twin``).

This module imports no GPU library and no backend module: it holds no kernel and no array.
"""

from __future__ import annotations

from hpcsolve.core.backends import owner_of

#: threads per block of every fused kernel (a power of two: Numba's shared-memory block reduction assumes it)
THREADS = 256
#: resident threads per SM the grid size assumes (SMs x RESIDENT_THREADS / THREADS blocks, one wave)
RESIDENT_THREADS = 2048


def max_blocks(sm_count: int, threads: int = THREADS) -> int:
    """The grid cap of a grid-stride launch: the blocks of ``threads`` threads that are resident at once on
    ``sm_count`` SMs."""
    return int(sm_count) * (RESIDENT_THREADS // threads)


def capture_graph(stream, fn, context):
    """Record what ``fn()`` launches on the CuPy stream ``stream`` into a CUDA graph (CuPy stream capture), inside
    ``context`` (the stream itself, or the device the stream belongs to). Returns (launcher, error): the graph's
    launcher and None, or None and the exception that stopped the capture (the first cause, not ``end_capture``'s
    "invalidated"; nothing recorded has run)."""
    err = graph = None
    try:
        with context:
            stream.synchronize()
            stream.begin_capture()
            try:
                fn()
            except Exception as exc:          # the first cause, not end_capture's "invalidated"
                err = exc
            finally:
                try:
                    graph = stream.end_capture()
                except Exception as exc:
                    err = err or exc
    except Exception as exc:
        err = err or exc
    if err is not None or graph is None:
        return None, err
    return (lambda: graph.launch(stream=stream)), None


def ops_on_stream(xp, stream, graphs: bool = False):
    """The low ops of the backend whose arrays are of the module ``xp`` (CuPy), launching on ``stream`` (a stream of
    that module), from the backend registry (``Backend.piece("fem.low_ops")(graphs=, stream=)``); None where no
    usable backend owns ``xp``. The caller enters the stream's device first (the kernels load on it)."""
    owner = owner_of(xp)
    if owner is None:
        return None
    return owner.piece("fem.low_ops")(graphs=graphs, stream=stream)
