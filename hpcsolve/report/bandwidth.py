"""Device copy bandwidth, measured in the same run as a benchmark (the ceiling for % of peak).

Bytes counted: read + written (a copy of N bytes moves 2N bytes).
"""

from __future__ import annotations

import statistics
import time

import numpy as np


def copy_bandwidth(backend: str = "cupy", nbytes: int = 2 * 1024**3, repeats: int = 10) -> dict:
    """Median device-to-device copy bandwidth in bytes/s (read + write) for a GPU backend,
    or the host memcpy bandwidth for 'numpy'."""
    if backend == "cupy":
        import cupy

        n = nbytes // 4
        src = cupy.arange(n, dtype=cupy.float32)
        dst = cupy.empty_like(src)
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        dst[...] = src  # warm up
        times = []
        for _ in range(repeats):
            start.record()
            cupy.copyto(dst, src)
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
        if not bool(cupy.array_equal(dst[:1024], src[:1024])):
            raise RuntimeError("copy bandwidth check: copied data differs")
        del src, dst
        cupy.get_default_memory_pool().free_all_blocks()
    elif backend == "numba-cuda":
        from numba import cuda

        n = nbytes // 4
        src = cuda.to_device(np.arange(n, dtype=np.float32))
        dst = cuda.device_array_like(src)
        dst.copy_to_device(src)
        cuda.synchronize()
        times = []
        for _ in range(repeats):
            start, stop = cuda.event(), cuda.event()
            start.record()
            dst.copy_to_device(src)
            stop.record()
            stop.synchronize()
            times.append(cuda.event_elapsed_time(start, stop) / 1e3)
        del src, dst
    else:
        n = min(nbytes, 256 * 1024**2) // 4
        src = np.arange(n, dtype=np.float32)
        dst = np.empty_like(src)
        times = []
        for _ in range(max(3, repeats // 2)):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            times.append(time.perf_counter() - t0)
    seconds = statistics.median(times)
    moved = 2 * n * 4
    return {"backend": backend, "bytes_copied": n * 4, "seconds": seconds, "bandwidth_Bps": moved / seconds,
            "bandwidth_GBps": moved / seconds / 1e9}
