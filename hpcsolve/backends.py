"""Backends: names, the availability probe, array modules, synchronization and timers.

Nothing else in hpcsolve imports cupy or numba.cuda at module level; GPU imports happen here,
lazily, and their absence becomes a reason string (``hpcsolve info``) or a BackendError.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass

import numpy as np

from hpcsolve.errors import BackendError

BACKENDS = ("numpy", "cupy", "numba-cuda")
CHOICES = ("auto",) + BACKENDS


@dataclass(frozen=True)
class BackendStatus:
    name: str
    available: bool
    reason: str          # why not, or what it runs on
    device: str = ""     # device name where one answers
    simulator: bool = False


def cuda_simulator_enabled() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


@functools.lru_cache(maxsize=None)
def probe(name: str) -> BackendStatus:
    """Say whether backend ``name`` can run here, and why not."""
    if name == "numpy":
        return BackendStatus("numpy", True, f"NumPy {np.__version__} on the CPU", device="CPU")
    if name == "cupy":
        try:
            import cupy
        except Exception as exc:  # ImportError, or a CUDA library load failure
            return BackendStatus("cupy", False, f"cupy does not import ({type(exc).__name__}: {exc}); "
                                 "install the GPU extra: pip install 'hpcsolve[cuda12]' or '[cuda13]'")
        try:
            if not cupy.is_available():
                return BackendStatus("cupy", False, "cupy imports but no CUDA device answers")
            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
            dev = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        except Exception as exc:
            return BackendStatus("cupy", False, f"cupy imports but the device does not answer ({exc})")
        return BackendStatus("cupy", True, f"CuPy {cupy.__version__} on {dev}", device=dev)
    if name == "numba-cuda":
        try:
            from numba import cuda
        except Exception as exc:
            return BackendStatus("numba-cuda", False, f"numba.cuda does not import ({type(exc).__name__}: {exc})")
        if cuda_simulator_enabled():
            return BackendStatus("numba-cuda", True, "Numba CUDA simulator (NUMBA_ENABLE_CUDASIM=1): "
                                 "correct but very slow; for tests on tiny grids", device="CUDA simulator",
                                 simulator=True)
        try:
            if not cuda.is_available():
                return BackendStatus("numba-cuda", False, "numba.cuda imports but no CUDA device/driver answers")
            dev = cuda.get_current_device()
            devname = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        except Exception as exc:
            return BackendStatus("numba-cuda", False, f"numba.cuda imports but the device does not answer ({exc})")
        return BackendStatus("numba-cuda", True, f"numba-cuda on {devname}", device=devname)
    raise BackendError(f"backend: unknown backend {name!r}; allowed: {', '.join(CHOICES)}")


def resolve(name: str | None, field: str = "run.backend") -> str:
    """Turn a requested backend (possibly 'auto') into a usable one, or raise BackendError saying why."""
    name = (name or "auto").lower()
    if name not in CHOICES:
        raise BackendError(f"{field}: got {name!r}; allowed: {', '.join(CHOICES)}")
    if name == "auto":
        if probe("cupy").available:
            return "cupy"
        nc = probe("numba-cuda")
        if nc.available and not nc.simulator:
            return "numba-cuda"
        return "numpy"
    status = probe(name)
    if not status.available:
        raise BackendError(f"{field}: backend {name!r} cannot run here: {status.reason}")
    return name


def is_gpu(name: str) -> bool:
    return name in ("cupy", "numba-cuda")


def array_module(name: str):
    """The ndarray module a backend's state lives in (cupy for 'cupy', numpy otherwise)."""
    if name == "cupy":
        import cupy

        return cupy
    return np


def get_array_module(array):
    """numpy or cupy, by the array's type (like cupy.get_array_module, without importing cupy)."""
    if type(array).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def to_host(array) -> np.ndarray:
    """Copy a backend array to a NumPy array (no-op for NumPy arrays)."""
    if isinstance(array, np.ndarray):
        return array
    if hasattr(array, "get"):
        return array.get()
    if hasattr(array, "copy_to_host"):
        return array.copy_to_host()
    return np.asarray(array)


def synchronize(name: str) -> None:
    if name == "cupy":
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    elif name == "numba-cuda" and not cuda_simulator_enabled():
        from numba import cuda

        cuda.synchronize()


class Timer:
    """Wall-clock timer that synchronizes the backend's device before reading the clock."""

    def __init__(self, backend: str = "numpy"):
        self.backend = backend
        self.seconds = 0.0

    def __enter__(self):
        synchronize(self.backend)
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        synchronize(self.backend)
        self.seconds = time.perf_counter() - self._t0
        return False


def device_name(name: str) -> str:
    status = probe(name)
    return status.device or status.reason


def device_memory_bytes(name: str) -> tuple[int, int] | None:
    """(free, total) device memory in bytes for GPU backends, None on the CPU."""
    if name == "cupy":
        import cupy

        return tuple(int(v) for v in cupy.cuda.runtime.memGetInfo())
    if name == "numba-cuda" and not cuda_simulator_enabled():
        from numba import cuda

        free, total = cuda.current_context().get_memory_info()
        return int(free), int(total)
    return None


def host_memory_available() -> int | None:
    """Free host memory in bytes (MemAvailable), None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def package_versions() -> dict[str, str]:
    """Versions of the packages a result depends on (for provenance)."""
    from importlib import metadata

    out = {}
    for pkg in ("hpcsolve", "numpy", "scipy", "numba", "numba-cuda", "cupy-cuda12x", "cupy-cuda13x",
                "h5py", "meshio", "pydantic", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    if "hpcsolve" not in out:
        from hpcsolve import __version__

        out["hpcsolve"] = __version__ + " (source tree)"
    return out
