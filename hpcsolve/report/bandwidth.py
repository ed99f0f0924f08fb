"""Device copy bandwidth, measured in the same run as a benchmark (the ceiling for % of peak).

Bytes counted: read + written (a copy of N bytes moves 2N bytes).
"""

from __future__ import annotations
from hpcsolve.core import backends


def copy_bandwidth(backend="cupy", nbytes: int = 2 * 1024**3, repeats: int = 10) -> dict:
    """Median device-to-device copy bandwidth in bytes/s (read + write) for a GPU backend,
    or the host memcpy bandwidth for 'numpy' (``Backend.copy_bandwidth``)."""

    return backends.get(backend).copy_bandwidth(nbytes, repeats)
