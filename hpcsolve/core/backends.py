"""Backends: one object per backend, chosen once from its name.

``get("cupy")`` (or ``resolve("auto")``) returns the :class:`Backend` that knows everything
name-dependent: the array module, transfers, synchronization, timers (wall clock and device events),
memory queries, the copy-bandwidth probe, and the factories of what the solver families run on it
(the LBM stepper, the Bouzidi pre-pass, the FEM low-level ops: ``backend.piece("lbm.stepper")``). Code below
the CLI/API asks the object; it never compares backend names. A new backend is one subclass here, registered in
``REGISTRY``, plus the pieces the solver families register for it.

This module knows no solver family: each family registers its per-backend pieces from its own package
(:func:`register_piece`, ``"module:attribute"`` strings imported on first use), as XLB's operators register
per backend, so that ``hpcsolve.core`` imports nothing from ``hpcsolve.lbm`` or ``hpcsolve.fem``.

Nothing else in hpcsolve imports cupy or numba.cuda at module level; the GPU modules come from one accessor each
(:func:`_cupy`, :func:`_numba_cuda`), called by the methods below on first use, and their absence becomes a reason
string (``hpcsolve info``) or a BackendError.
"""

from __future__ import annotations

import functools
import gc
import importlib
import importlib.util
import sys
from importlib import metadata
import os
import statistics
import threading
import time
from dataclasses import dataclass

import numpy as np

from hpcsolve.core.errors import BackendError, shown
from hpcsolve.core.version import __version__


@dataclass(frozen=True)
class BackendStatus:
    name: str
    available: bool
    reason: str          # why not, or what it runs on
    device: str = ""     # device name where one answers
    simulator: bool = False


def cuda_simulator_enabled() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def _cupy():
    """The ``cupy`` module, imported on first use: an optional GPU dependency (the cuda12/cuda13 extras) whose import
    also loads the CUDA libraries, so a CPU-only run never pays for it. Cached by the import system (``sys.modules``),
    not here: the CUDA-C compile tests put a recording stand-in there for a while (``tests/cuda_compile_util.py``)."""
    import cupy  # late: optional GPU module (the cuda extras), loads the CUDA libraries

    return cupy


def _numba_cuda():
    """The ``numba.cuda`` module, imported on first use: optional, about 100 MB and half a second to import, and
    ``NUMBA_ENABLE_CUDASIM`` must be set before it is (the simulator tests set it in their own process). Cached by the
    import system (``sys.modules``)."""
    from numba import cuda  # late: optional GPU module; NUMBA_ENABLE_CUDASIM is read at its import

    return cuda


class Timer:
    """Wall-clock timer that synchronizes the backend's device before reading the clock."""

    def __init__(self, backend: "Backend | str" = "numpy"):
        self.backend = get(backend) if isinstance(backend, str) else backend
        self.seconds = 0.0

    def __enter__(self):
        self.backend.synchronize()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.backend.synchronize()
        self.seconds = time.perf_counter() - self._t0
        return False


class Backend:
    """What one backend provides. Subclasses override what differs; the base class is the CPU."""

    name: str = ""
    gpu: bool = False                 #: state lives in device memory (GPU backends)

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"<backend {self.name}>"

    def __reduce__(self):             # pickles (multiprocessing, deep copies) as the registered instance
        return get, (self.name,)

    # ---- availability
    @property
    def status(self) -> BackendStatus:
        return _probe_cached(self.name)

    def _probe(self) -> BackendStatus:
        raise NotImplementedError

    @property
    def available(self) -> bool:
        return self.status.available

    @property
    def simulator(self) -> bool:
        return self.status.simulator

    def require(self, field: str = "backend") -> "Backend":
        status = self.status
        if not status.available:
            raise BackendError(f"{field}: backend {self.name!r} cannot run here: {status.reason}")
        return self

    @property
    def device_name(self) -> str:
        status = self.status
        return status.device or status.reason

    # ---- arrays
    @property
    def xp(self):
        """The ndarray module the backend's state lives in."""
        return np

    def to_device(self, host: np.ndarray):
        return np.array(host, copy=True)

    def to_host(self, array) -> np.ndarray:
        return to_host(array)

    def synchronize(self) -> None:
        pass

    def timer(self) -> Timer:
        return Timer(self)

    def run_context(self):
        """A context for a timed run: host BLAS/OpenMP thread pools pinned to ``cpu_threads()`` (on a
        2-core machine OpenBLAS's second thread made small fp64 CG solves 15x slower)."""
        from threadpoolctl import threadpool_limits  # late: 13 ms of import, needed only around a timed run

        return threadpool_limits(limits=cpu_threads())

    def event_clock(self) -> "EventClock":
        """Times a region of work (device events on a GPU, the host clock here)."""
        return EventClock(None, None)

    def free_pool(self) -> None:
        """Return cached device memory (between benchmark sizes); a garbage collection everywhere."""
        gc.collect()

    # ---- memory
    def memory(self) -> tuple[int, int] | None:
        """(free, total) device memory in bytes for GPU backends, None on the CPU."""
        return None

    def available_memory(self) -> int | None:
        """Free memory where the state lives: device memory for GPUs, RAM for the CPU."""
        mem = self.memory()
        return mem[0] if mem is not None else host_memory_available()

    def copy_bandwidth(self, nbytes: int = 2 * 1024**3, repeats: int = 10) -> dict:
        """Median copy bandwidth (read + write) in the memory the state lives in; see report/bandwidth."""
        n = min(nbytes, 256 * 1024**2) // 4
        src = np.arange(n, dtype=np.float32)
        dst = np.empty_like(src)
        times = []
        for _ in range(max(3, repeats // 2)):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            times.append(time.perf_counter() - t0)
        return _bandwidth(self.name, n * 4, times)

    # ---- what the solver families run on it
    def piece(self, kind: str):
        """The piece of kind ``kind`` a solver family registered for this backend (:func:`register_piece`): a
        class or factory, imported on first use. BackendError when the backend cannot run here or has none."""
        self.require()
        target = _PIECES.get((kind, self.name))
        if target is None:
            raise BackendError(f"backend {self.name!r}: no {kind} for it in this build "
                               f"(registered: {', '.join(sorted(b for k, b in _PIECES if k == kind)) or 'none'})")
        module, _, attr = target.partition(":")
        return getattr(_import_kernels(self, module, kind), attr)

    def gpu_error(self, exc: BaseException) -> BackendError | None:
        """A GPU library's exception as one clear BackendError; None where it is not one."""
        return None


class NumpyBackend(Backend):
    name = "numpy"

    def _probe(self):
        return BackendStatus("numpy", True, f"NumPy {np.__version__} on the CPU", device="CPU")


_GPU_ERROR_MODULES = ("cupy", "cupy_backends", "cupyx", "numba.cuda", "cuda")


class _GpuBackend(Backend):
    gpu = True

    def gpu_error(self, exc):
        mod = type(exc).__module__ or ""
        if mod.startswith(_GPU_ERROR_MODULES) or "CUDA" in type(exc).__name__:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            hint = ("reduce the problem size or use a smaller precision" if "memory" in text.lower()
                    else "check `hpcsolve info` and the driver (nvidia-smi)")
            return BackendError(f"{self.name}: GPU error ({type(exc).__name__}): {text}; {hint}")
        return None


class CupyBackend(_GpuBackend):
    name = "cupy"

    def _probe(self):
        try:
            cupy = _cupy()
        except Exception as exc:  # ImportError, or a CUDA library load failure
            return BackendStatus("cupy", False, f"cupy does not import ({type(exc).__name__}: {exc}); "
                                 "install the GPU extra: pip install 'hpcsolve[cuda12]' or '[cuda13]'")
        try:
            if not cupy.is_available():
                return BackendStatus("cupy", False, "cupy imports but no CUDA device answers")
            props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
            dev = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            cupy.cuda.runtime.memGetInfo()   # the CUDA context, made here: a prewarm thread makes it off the main one
        except Exception as exc:
            return BackendStatus("cupy", False, f"cupy imports but the device does not answer ({exc})")
        return BackendStatus("cupy", True, f"CuPy {cupy.__version__} on {dev}", device=dev)

    @property
    def xp(self):
        cupy = _cupy()
        return cupy

    def to_device(self, host):
        cupy = _cupy()
        return cupy.asarray(host)

    def synchronize(self):
        cupy = _cupy()
        cupy.cuda.get_current_stream().synchronize()

    def event_clock(self):
        cupy = _cupy()
        return EventClock(cupy.cuda.Event, lambda a, b: cupy.cuda.get_elapsed_time(a, b) / 1e3)

    def free_pool(self):
        cupy = _cupy()
        cupy.get_default_memory_pool().free_all_blocks()
        super().free_pool()

    def memory(self):
        cupy = _cupy()
        return tuple(int(v) for v in cupy.cuda.runtime.memGetInfo())

    def copy_bandwidth(self, nbytes=2 * 1024**3, repeats=10):
        cupy = _cupy()
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
        self.free_pool()
        return _bandwidth(self.name, n * 4, times)



class NumbaCudaBackend(_GpuBackend):
    name = "numba-cuda"

    def _probe(self):
        try:
            cuda = _numba_cuda()
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

    def to_device(self, host):
        cuda = _numba_cuda()
        return cuda.to_device(np.ascontiguousarray(host))

    def synchronize(self):
        if not cuda_simulator_enabled():
            _numba_cuda().synchronize()

    def event_clock(self):
        cuda = _numba_cuda()
        return EventClock(cuda.event, lambda a, b: a.elapsed_time(b) / 1e3, stream_record=True)

    def free_pool(self):
        """Also CuPy's pool where CuPy is loaded: Numba-CUDA's multigrid set-up and 16-bit guard allocate there."""
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            cupy.get_default_memory_pool().free_all_blocks()
        super().free_pool()

    def memory(self):
        if cuda_simulator_enabled():
            return None
        cuda = _numba_cuda()
        free, total = cuda.current_context().get_memory_info()
        return int(free), int(total)

    def copy_bandwidth(self, nbytes=2 * 1024**3, repeats=10):
        cuda = _numba_cuda()
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
        return _bandwidth(self.name, n * 4, times)



class EventClock:
    """Times ``fn()`` with a pair of device events (or the host clock when ``make_event`` is None)."""

    def __init__(self, make_event, elapsed, stream_record: bool = False):
        self._mk, self._elapsed, self._stream_record = make_event, elapsed, stream_record

    def time(self, fn, stream=None) -> float:
        if self._mk is None:
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        start, stop = self._mk(), self._mk()
        args = (stream,) if self._stream_record and stream is not None else ()
        start.record(*args)
        fn()
        stop.record(*args)
        stop.synchronize()
        return self._elapsed(start, stop)


REGISTRY: dict[str, type[Backend]] = {cls.name: cls for cls in (NumpyBackend, CupyBackend, NumbaCudaBackend)}
BACKENDS = tuple(REGISTRY)
CHOICES = ("auto",) + BACKENDS


@functools.lru_cache(maxsize=None)
def _instance(name: str) -> Backend:
    return REGISTRY[name]()


@functools.lru_cache(maxsize=None)
def _probe_once(name: str) -> BackendStatus:
    return _instance(name)._probe()


_PROBE_LOCKS = {name: threading.Lock() for name in REGISTRY}


def _probe_cached(name: str) -> BackendStatus:
    """The backend's probe, made once per process; a caller that asks while another thread probes (``prewarm``)
    waits for that probe's answer."""
    with _PROBE_LOCKS[name]:
        return _probe_once(name)


#: what ``prewarm`` probes for a requested backend: "auto" tries CuPy first (``resolve``)
_PREWARM = {"auto": "cupy", "cupy": "cupy"}


def prewarm(requested: "str | None") -> "threading.Thread | None":
    """Probe the GPU backend a run asked for (``requested``: a backend name, "auto" or None for auto) in a daemon
    thread now, so that the main thread's work before it needs the backend (loading and validating the case)
    overlaps it: CuPy's import, the driver's start and the CUDA context (0.4-0.5 s of a GPU run's start on the H200
    machine, its driver calls outside the GIL). A later ``probe`` / ``resolve`` waits for its answer. Nothing for a
    CPU backend or where CuPy is not installed (no GPU context for a NumPy run); returns the thread, or None."""
    key = requested.name if isinstance(requested, Backend) else str(requested or "auto")
    name = _PREWARM.get(key.lower())
    if name is None or importlib.util.find_spec("cupy") is None:
        return None
    thread = threading.Thread(target=_probe_cached, args=(name,), name=f"hpcsolve-probe-{name}", daemon=True)
    thread.start()
    return thread


def get(name: "str | Backend", field: str = "backend") -> Backend:
    """The Backend called ``name`` (not checked for availability; see :func:`resolve`)."""
    if isinstance(name, Backend):
        return name
    key = str(name).lower()
    if key not in REGISTRY:
        raise BackendError(f"{field}: got {name!r}; allowed: {', '.join(CHOICES)}")
    return _instance(key)


def owner_of(xp) -> "Backend | None":
    """The first registered backend whose state lives in the array module ``xp`` (``Backend.xp``) and that can run
    here, or None."""
    for name in REGISTRY:
        backend = _instance(name)
        if backend.status.available and not backend.status.simulator and backend.xp is xp:
            return backend
    return None


def probe(name: "str | Backend") -> BackendStatus:
    """Say whether backend ``name`` can run here, and why not."""
    return get(name).status


def resolve(name: "str | Backend | None", field: str = "run.backend") -> Backend:
    """The usable Backend for a request (possibly 'auto'), or a BackendError saying why not."""
    if isinstance(name, Backend):
        return name.require(field)
    key = (name or "auto").lower() if isinstance(name, (str, type(None))) else name
    if key == "auto":
        if probe("cupy").available:
            return get("cupy")
        nc = probe("numba-cuda")
        if nc.available and not nc.simulator:
            return get("numba-cuda")
        return get("numpy")
    return get(key, field).require(field)


#: (piece kind, backend name) -> "module:attribute", filled by the solver families' packages
_PIECES: dict[tuple[str, str], str] = {}


def register_piece(kind: str, backend: str, target: str) -> None:
    """Register ``target`` ("package.module:attribute", imported when first asked for) as the ``kind`` piece of
    backend ``backend`` (a name in ``REGISTRY``). Called by the solver families at import."""
    if backend not in REGISTRY:
        raise ValueError(f"register_piece: unknown backend {backend!r}")
    if ":" not in target:
        raise ValueError(f"register_piece: {target!r} is not 'module:attribute'")
    _PIECES[(kind, backend)] = target


def _import_kernels(backend: Backend, module: str, what: str):
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise BackendError(f"backend {backend.name!r}: the {what} for it are not in this build") from None
        raise


def _bandwidth(name: str, nbytes: int, times: list[float]) -> dict:
    seconds = statistics.median(times)
    moved = 2 * nbytes
    return {"backend": name, "bytes_copied": nbytes, "seconds": seconds, "bandwidth_Bps": moved / seconds,
            "bandwidth_GBps": moved / seconds / 1e9, "min_seconds": min(times), "max_seconds": max(times),
            "repeats": len(times)}


#: most host threads HPCSOLVE_CPU_THREADS may ask for (threadpoolctl hands the number to C libraries as a C int;
#: 99999999999999999999 was a ctypes OverflowError there)
MAX_CPU_THREADS = 4096


def cpu_threads() -> int:
    """Host BLAS/OpenMP threads for runs: ``HPCSOLVE_CPU_THREADS`` (default 1: the NumPy/SciPy
    reference is a single-core reference, and its timings are then repeatable), 1 to MAX_CPU_THREADS."""
    value = os.environ.get("HPCSOLVE_CPU_THREADS", "1")
    text = value.strip()
    n = int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else 0
    if not 1 <= n <= MAX_CPU_THREADS:
        raise BackendError(f"HPCSOLVE_CPU_THREADS: got {shown(value)}; allowed: an integer from 1 to "
                           f"{MAX_CPU_THREADS} (host BLAS/OpenMP threads of a run)")
    return n


def thread_pools() -> list[dict]:
    """The host thread pools in effect now (library, API, threads), for provenance."""
    from threadpoolctl import threadpool_info  # late: 13 ms of import, needed only for a result's provenance

    return [{"library": p.get("internal_api", p.get("prefix", "")), "api": p.get("user_api", ""),
             "threads": p.get("num_threads")} for p in threadpool_info()]


def get_array_module(array):
    """numpy or cupy, by the array's type (like cupy.get_array_module, without importing cupy)."""
    if type(array).__module__.startswith("cupy"):
        cupy = _cupy()
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
    """Versions of the packages a result depends on (for provenance); looked up once per process (importlib.metadata
    reads every installed package's metadata on each call: about 60 ms of every small run on a 2-core machine)."""
    return dict(_package_versions())


@functools.cache
def _package_versions() -> dict[str, str]:
    out = {}
    for pkg in ("hpcsolve", "numpy", "scipy", "numba", "numba-cuda", "cupy-cuda12x", "cupy-cuda13x",
                "h5py", "meshio", "pydantic", "matplotlib"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    if "hpcsolve" not in out:
        out["hpcsolve"] = __version__ + " (source tree)"
    return out
