"""The CUDA C the CuPy backends emit, and NVRTC to compile it on a machine without a GPU (tests/core/test_cuda_compile.py).

Where the sources come from: the code path the CuPy backends run. ``lbm_modules`` builds a
``kernels_cupy.CupyStepper`` (``fem_modules`` calls the FEM's ``_module``) inside ``recorded_modules``: a stand-in for
the ``cupy`` module that holds its arrays on the host and records every ``cupy.RawModule(code=..., options=...,
name_expressions=...)``, every ``get_function(name)`` asked of it, every kernel launch and every stream capture. So
the compiled text, its options and the kernel names looked up are exactly what the stepper hands CuPy on a GPU
machine; nothing is copied from the stepper's constructor. The LBM setups are the
shipped cases (``cases/*.toml``, ``solver = "lbm"``) at a small resolution, through ``runner.build_setup``, with case
overrides (``--set`` syntax) for what the shipped files do not use (collision, outlet rule, absorbing layer,
streaming) and stepper keywords where a shape is a stepper option (``pairs``, ``max_registers``).

How it compiles: as CuPy compiles a RawModule (``cupy/_core/core.pyx`` ``assemble_cupy_compiler_options``,
``cupy/cuda/compiler.py``): the caller's options, ``-I`` of the CUDA runtime headers (CuPy takes them from
CUDA_PATH/include or the ``nvidia-cuda-runtime`` wheel; here the wheel, found the same way), ``-ftz=true`` and
``-arch=sm_XX`` (CuPy compiles to a CUBIN where NVRTC knows the device's arch, as it knows sm_90 and sm_89), the name
expressions registered before the compile and looked up after. Not passed: CuPy's own include directories (its
bundled CCCL and ``cupy/*.cuh``), which no source here includes, and which do not exist without CuPy. Added:
``--ptxas-options=-v``, which changes no code, so that ptxas reports the registers of each kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import re
import sys
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "cases"

#: the compile targets: the H200 (sm_90) the project is tuned on, and one consumer card (sm_89: RTX 4090)
TARGETS = ("sm_90", "sm_89")

#: the wheels that provide the CUDA runtime headers (cuda_fp16.h), newest first (CuPy: ``_environment.
#: _get_include_dir_from_conda_or_wheel``)
RUNTIME_WHEELS = ("nvidia-cuda-runtime", "nvidia-cuda-runtime-cu12")


# ------------------------------------------------------------------------------------------------
# NVRTC

@functools.lru_cache(maxsize=None)
def nvrtc_problem() -> str | None:
    """Why NVRTC cannot compile here (None: it can): cuda-bindings missing, libnvrtc not found, or no
    cuda_fp16.h to include."""
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        return f"cuda.bindings.nvrtc does not import ({exc}); pip install -e '.[dev]'"
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception as exc:   # cuda-bindings raises when it cannot load libnvrtc
        return f"libnvrtc cannot be loaded ({type(exc).__name__}: {exc}); pip install -e '.[dev]' (nvidia-cuda-nvrtc)"
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return f"nvrtcVersion failed: {err}"
    if cuda_include_dir() is None:
        return f"no cuda_fp16.h: none of the wheels {', '.join(RUNTIME_WHEELS)} is installed"
    return None


@functools.lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return major, minor


@functools.lru_cache(maxsize=None)
def cuda_include_dir() -> str | None:
    """The include directory of the CUDA runtime headers from their wheel (the one that has cuda_fp16.h)."""
    for name in RUNTIME_WHEELS:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            if f.name == "cuda_fp16.h" and f.parent.name == "include":
                return str(Path(dist.locate_file(f)).parent)
    return None


@dataclasses.dataclass(frozen=True)
class Compiled:
    """What NVRTC made of one source for one arch."""

    ok: bool
    log: str
    ptx: str
    cubin: bytes
    lowered: dict          # name expression -> its mangled name (the PTX entry)

    def entries(self) -> list[str]:
        """The kernels (``.entry`` names) of the PTX."""
        return re.findall(r"\.entry\s+([A-Za-z_$][\w$]*)", self.ptx)

    def params(self) -> dict[str, list[str]]:
        """Per kernel of the PTX, the types of its parameters in order ('u64', 'u32', 'f32', ...)."""
        out = {}
        for m in re.finditer(r"\.entry\s+([\w$]+)\s*\((.*?)\)", self.ptx, re.S):
            out[m.group(1)] = re.findall(r"\.param\s+\.(\w+)", m.group(2))
        return out

    def registers(self) -> dict[str, int]:
        """Registers per kernel as ptxas reported them (``--ptxas-options=-v``)."""
        out, current = {}, None
        for line in self.log.splitlines():
            m = re.search(r"Compiling entry function '([^']+)'", line)
            if m:
                current = m.group(1)
            m = re.search(r"Used (\d+) registers", line)
            if m and current is not None:
                out[current] = int(m.group(1))
        return out

    def errors(self) -> list[str]:
        """The log lines that report an error (a compile with only warnings has none)."""
        return [line for line in self.log.splitlines() if re.search(r"\berror\b", line)]


def cupy_options(options: tuple[str, ...], arch: str) -> list[str]:
    """The options CuPy compiles a RawModule with (see the module docstring), for ``arch`` ('sm_90')."""
    return [*options, f"-I{cuda_include_dir()}", "-ftz=true", f"-arch={arch}", "--ptxas-options=-v"]


def compile_cuda(code: str, options: tuple[str, ...], arch: str, name_expressions: tuple[str, ...] = (),
                 filename: str = "kern.cu", front_end_only: bool = False) -> Compiled:
    """Compile ``code`` with NVRTC as CuPy would (``cupy_options``); name expressions as CuPy registers them.
    ``front_end_only``: stop after the front end (``--fdevice-syntax-only``: no PTX, no CUBIN)."""
    from cuda.bindings import nvrtc

    def check(result, what):
        err, *rest = result if isinstance(result, tuple) else (result,)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise RuntimeError(f"{what}: {err}")
        return rest[0] if len(rest) == 1 else rest

    prog = check(nvrtc.nvrtcCreateProgram(code.encode(), filename.encode(), 0, [], []), "nvrtcCreateProgram")
    try:
        for name in name_expressions:
            check(nvrtc.nvrtcAddNameExpression(prog, name.encode()), f"nvrtcAddNameExpression({name})")
        opts = cupy_options(options, arch)
        if front_end_only:
            opts = [o for o in opts if not o.startswith("--ptxas-options")] + ["--fdevice-syntax-only"]
        opts = [o.encode() for o in opts]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        size = check(nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        # fresh buffers NVRTC writes into: bytes(size), never b" " * size (for size 1 that is the interpreter's
        # shared one-byte b" ", and NVRTC's NUL written into it turned every b" " of the process into b"\x00")
        log = bytes(size)
        check(nvrtc.nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")
        log = log.rstrip(b"\x00 ").decode(errors="replace")
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            return Compiled(False, f"{err}\n{log}", "", b"", {})
        if front_end_only:
            return Compiled(True, log, "", b"", {})
        size = check(nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        ptx = bytes(size)
        check(nvrtc.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        size = check(nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin = bytes(size)
        if size:
            check(nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        lowered = {name: check(nvrtc.nvrtcGetLoweredName(prog, name.encode()), "nvrtcGetLoweredName").decode()
                   for name in name_expressions}
        return Compiled(True, log, ptx.rstrip(b"\x00").decode(), bytes(cubin), lowered)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


# ------------------------------------------------------------------------------------------------
# The sources, from the backends' own code path (a recording stand-in for cupy)

@dataclasses.dataclass(frozen=True)
class ModuleCall:
    """One ``cupy.RawModule`` the backend made, and the kernels it asked of it."""

    code: str
    options: tuple[str, ...]
    name_expressions: tuple[str, ...]
    requested: tuple[str, ...]
    site: tuple[str, int, str]        # (file relative to the repository, line, function) of the RawModule call


class _HostArray(np.ndarray):
    """A host array standing in for a cupy.ndarray (``get()`` copies it to the host)."""

    def get(self):
        return np.asarray(self)


def _host(a) -> _HostArray:
    return np.asarray(a).view(_HostArray)


def _caller() -> tuple[str, int, str]:
    """(file, line, function) of the first frame outside this module and functools: where RawModule was called."""
    frame = sys._getframe(1)
    while frame.f_code.co_filename in (__file__, functools.__file__):
        frame = frame.f_back
    path = Path(frame.f_code.co_filename).resolve()
    try:
        path = path.relative_to(ROOT)
    except ValueError:
        pass
    return str(path), frame.f_lineno, frame.f_code.co_qualname


class Recorder:
    """What the recording stand-in for cupy saw: the RawModules made (``modules``), the kernel launches executed
    (``launches``, in order; a replayed graph's launches too, marked ``replayed``) and the graphs captured
    (``graphs``: the launches each stream capture recorded instead of executing)."""

    def __init__(self):
        self.modules: list[_RecordingModule] = []
        self.launches: list[Launch] = []
        self.graphs: list[list[Launch]] = []
        self.capturing: list | None = None

    def launch(self, launch: "Launch") -> None:
        (self.capturing if self.capturing is not None else self.launches).append(launch)


@dataclasses.dataclass(frozen=True)
class Launch:
    """One kernel launch: the kernel's name (a RawModule's name expression or function name; an
    ElementwiseKernel's name), its module (None: an ElementwiseKernel), grid, block and arguments."""

    kernel: str
    module: object
    grid: tuple | None
    block: tuple | None
    args: tuple
    replayed: bool = False


class _RecordingModule:
    def __init__(self, rec: Recorder, code: str, options=(), name_expressions=None, **kw):
        if kw:
            raise TypeError(f"RawModule keywords the recorder does not know: {sorted(kw)}")
        self.code, self.options = code, tuple(options)
        self.name_expressions = tuple(name_expressions or ())
        self.requested: list[str] = []
        self.site = _caller()
        self.rec = rec
        rec.modules.append(self)

    def get_function(self, name: str):
        self.requested.append(name)

        def kernel(grid, block, args, **kw):          # cupy.RawKernel.__call__: a launch (recorded, not run)
            self.rec.launch(Launch(name, self, tuple(grid), tuple(block), tuple(args)))
        return kernel


class _Stream:
    """A cupy.cuda.Stream: a context manager, and ``begin_capture`` / ``end_capture`` recording the launches in
    between into a graph whose ``launch()`` replays them."""

    def __init__(self, rec: Recorder):
        self.rec = rec

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def synchronize(self):
        pass

    def begin_capture(self):
        assert self.rec.capturing is None, "nested capture"
        self.rec.capturing = []

    def end_capture(self):
        captured, self.rec.capturing = self.rec.capturing, None
        self.rec.graphs.append(captured)
        rec = self.rec

        class Graph:
            def launch(self, stream=None):
                rec.launches.extend(dataclasses.replace(x, replayed=True) for x in captured)
        return Graph()


def _elementwise_kernel(rec: Recorder):
    def make(in_params, out_params, operation, name, **kw):
        return lambda *args, **kw2: rec.launch(Launch(name, None, None, None, tuple(args)))
    return make


def _fake_cupy(rec: Recorder, l2_bytes: int) -> types.ModuleType:
    cp = types.ModuleType("cupy")
    cp.__dict__.update(
        RawModule=functools.partial(_RecordingModule, rec),
        ElementwiseKernel=_elementwise_kernel(rec),
        ndarray=_HostArray,
        asarray=lambda a, dtype=None: _host(np.asarray(a, dtype=dtype)),
        array=lambda a, dtype=None, order="K": _host(np.array(a, dtype=dtype, order=order)),
        zeros=lambda shape, dtype=float: _host(np.zeros(shape, dtype)),
        empty=lambda shape, dtype=float: _host(np.empty(shape, dtype)),
        float64=np.float64,
        cuda=types.SimpleNamespace(
            Stream=lambda non_blocking=False: _Stream(rec),
            Device=lambda i=0: types.SimpleNamespace(id=0, attributes={"MultiProcessorCount": 132}),
            runtime=types.SimpleNamespace(getDeviceProperties=lambda i: {"l2CacheSize": l2_bytes})))
    return cp


#: the H200's L2 cache (60 MiB): what ``lattice.streaming = "auto"`` decides against
H200_L2 = 60 * 2**20


def _cached_cupy_objects():
    """The package's caches that hold CuPy objects (filled with stand-ins inside ``recorded_modules``)."""
    from hpcsolve.fem.linalg import kernels_cupy as fem_cupy
    from hpcsolve.lbm import device_monitor
    from hpcsolve.lbm.steppers import kernels_cupy as lbm_cupy

    return fem_cupy._module, fem_cupy.low_ops, lbm_cupy._scale_kernel, device_monitor._cupy_module


@contextlib.contextmanager
def recorded_modules(l2_bytes: int = H200_L2):
    """Inside: ``import cupy`` gives the recording stand-in; the Recorder it yields sees the RawModules made, the
    kernels launched and the graphs captured meanwhile. Afterwards the real cupy (where installed) is put back and
    the package's caches that may hold stand-ins are emptied (a real cupy fills them again at its next use)."""
    rec = Recorder()
    saved = sys.modules.get("cupy")
    sys.modules["cupy"] = _fake_cupy(rec, l2_bytes)
    try:
        yield rec
    finally:
        if saved is None:
            sys.modules.pop("cupy", None)
        else:
            sys.modules["cupy"] = saved
        for cache in _cached_cupy_objects():
            cache.cache_clear()


def _calls(rec: Recorder) -> list[ModuleCall]:
    return [ModuleCall(m.code, m.options, m.name_expressions, tuple(m.requested), m.site) for m in rec.modules]


def lbm_modules(setup, **stepper_options) -> list[ModuleCall]:
    """The RawModules ``kernels_cupy.CupyStepper(setup, **stepper_options)`` makes (step kernels, Bouzidi pre-pass)."""
    from hpcsolve.lbm.steppers import kernels_cupy

    with recorded_modules() as rec:
        st = kernels_cupy.CupyStepper(setup, graphs=False, **stepper_options)
        st.point_kernels()
    return _calls(rec)


def fem_modules() -> list[ModuleCall]:
    """The RawModule of the FEM's fused CG and multigrid kernels (``fem.kernels_cupy._module``), with every
    kernel the CuPy ops can ask for (``_names()``, the module's name expressions) requested."""
    from hpcsolve.fem.linalg import kernels_cupy

    with recorded_modules() as rec:
        module = kernels_cupy._module.__wrapped__()       # past its lru_cache: a real cupy may have filled it
        for name in module.name_expressions:
            module.get_function(name)
    return _calls(rec)


# ------------------------------------------------------------------------------------------------
# The LBM configurations: shipped cases at a small resolution, and the variants they do not ship

def lbm_policies():
    """Every precision policy the LBM runs with (``precision.POLICIES``)."""
    from hpcsolve.core.precision import POLICIES

    return [p for p in POLICIES.values() if p.supports("lbm")]


def lbm_case_files() -> list[Path]:
    import tomllib

    return sorted(p for p in CASES.glob("*.toml") if tomllib.loads(p.read_text()).get("solver") == "lbm")


#: the small lattice of every case: at least this many cells across the characteristic length (the smallest such
#: resolution the case accepts: a domain must be a whole number of cells), and the Reynolds number lowered so that
#: tau = 0.5 + 3 u R / Re stays 0.6. Neither the grid nor tau is in the kernel source, except that the block size of
#: 16-bit storage follows the row length (gpu_common.step_kernel_shape).
SMALL_RESOLUTION = 8
SMALL_TAU = 0.6


@functools.lru_cache(maxsize=None)
def small_overrides(path: Path) -> tuple[str, ...]:
    """The case overrides that make the case at ``path`` small (see SMALL_RESOLUTION)."""
    import tomllib

    from hpcsolve.core.cases import load_case
    from hpcsolve.core.errors import CaseError
    from hpcsolve.lbm.case import derive

    u = tomllib.loads(path.read_text()).get("lattice", {}).get("velocity", 0.05)
    problems = []
    for resolution in range(SMALL_RESOLUTION, 8 * SMALL_RESOLUTION):
        # the Reynolds number set for the small tau: the benchmark's reference no longer describes the flow
        over = (f"lattice.resolution={resolution}", f"physics.reynolds={3 * u * resolution / (SMALL_TAU - 0.5)!r}",
                "validation.reference=none")
        try:
            derive(load_case(path, over))
        except CaseError as exc:
            problems.append(str(exc))
            continue
        return over
    raise ValueError(f"{path.name}: no small resolution accepted: {problems[-1]}")


def case_setup(path: Path, policy, overrides=()):
    """The LBMSetup ``runner.build_setup`` makes of the case file at a small resolution, with ``overrides``."""
    from hpcsolve.core.cases import load_case
    from hpcsolve.lbm.setup import build_setup

    case = load_case(path, small_overrides(path) + tuple(overrides))
    return build_setup(case, policy)[2]


#: the outlet rules and the absorbing layer: every boundary set the step kernel source depends on (walls, moving
#: walls, velocity inlets and the pressure outlet are in every source; interpolated links are a source of their own)
BOUNDARY_SETS = {
    "pressure": [],
    "characteristic": ["boundaries.outlet=characteristic"],
    "layer": ["boundaries.absorbing_layer.width=1.0"],
    "characteristic+layer": ["boundaries.outlet=characteristic", "boundaries.absorbing_layer.width=1.0"],
}
STREAMING = ("two-buffer", "in-place")
#: the case the boundary sets are put on: a channel with an inlet opposite the outlet (what the characteristic
#: outlet needs), 4 m long (room for a 1 m layer)
CHANNEL_CASE = "poiseuille.toml"


@dataclasses.dataclass(frozen=True)
class Config:
    """One CuPy stepper the test builds: a case file, its overrides, the policy, the stepper keywords, and the
    targets its sources are taken to a CUBIN for in the default suite (every source passes the front end for
    every target; see ``collect_sources``)."""

    label: str
    case: str
    policy_name: str
    overrides: tuple[str, ...] = ()
    options: tuple = ()                  # stepper keywords as (name, value) pairs
    cubin: tuple[str, ...] = ()

    def modules(self) -> list[ModuleCall]:
        from hpcsolve.core.precision import POLICIES

        setup = case_setup(CASES / self.case, POLICIES[self.policy_name], self.overrides)
        return lbm_modules(setup, **dict(self.options))


def lbm_configs() -> list[Config]:
    """The LBM configurations whose sources the test compiles:

    - every shipped LBM case x every LBM policy x both streamings (two buffers, in place): the sources the shipped
      cases run. CUBIN: sm_90 all, sm_89 two buffers;
    - on the channel case: every boundary set x both streamings x every policy, with BGK where exactly one of the
      outlet rule and the layer is on and TRT otherwise, so that each policy and streaming has all four collision
      functions (BGK, TRT, each with and without the layer's bulk relaxation). CUBIN: sm_90 for the characteristic
      outlet (BGK) and for both (TRT), sm_89 for the layer (BGK); the pressure outlet (TRT) is the shipped Poiseuille
      case's source. So every collision function and boundary set of every policy and streaming is taken to a
      CUBIN at one of the two targets;
    - 16-bit storage: the pair kernel's launch shape (``pairs=True``, what grids over 512^2 cells get; the code of
      the two-buffer source at another block size); every policy: a register cap on the step kernels
      (``max_registers``, the tuning script's option: ``__maxnreg__`` instead of ``__launch_bounds__``), two
      buffers (16-bit: in the pair shape) and in place. CUBIN at sm_90: one capped source per kind of step kernel
      (fp64 two buffers, fp32 in place, fp16c pair shape: its lbm_step and lbm_step_pair)."""
    out = []
    for policy in lbm_policies():
        p, half = policy.name, policy.storage_bytes == 2
        for path in lbm_case_files():
            for s in STREAMING:
                out.append(Config(f"{path.stem}/{p}/{s}", path.name, p, (f"lattice.streaming={s}",),
                                  cubin=("sm_90", "sm_89") if s == "two-buffer" else ("sm_90",)))
        for bname, over in BOUNDARY_SETS.items():
            collision = "trt" if ("characteristic" in bname) == ("layer" in bname) else "bgk"
            for s in STREAMING:
                cubin = {"characteristic+layer": ("sm_90",), "characteristic": ("sm_90",),
                         "layer": ("sm_89",)}.get(bname, ())
                out.append(Config(f"channel-{bname}-{collision}/{p}/{s}", CHANNEL_CASE, p,
                                  (f"lattice.streaming={s}", f"lattice.collision={collision}", *over), cubin=cubin))
        if half:
            out.append(Config(f"channel-pairs/{p}/two-buffer", CHANNEL_CASE, p, ("lattice.streaming=two-buffer",),
                              (("pairs", True),)))
        for s in STREAMING:
            shape = (("pairs", True),) if half and s == "two-buffer" else ()
            capped = {"fp64": "two-buffer", "fp32": "in-place", "fp16c": "two-buffer"}.get(p) == s
            out.append(Config(f"channel-{'pairs-' if shape else ''}maxreg40/{p}/{s}", CHANNEL_CASE, p,
                              (f"lattice.streaming={s}",), shape + (("max_registers", 40),),
                              cubin=("sm_90",) if capped else ()))
    return out


# ------------------------------------------------------------------------------------------------
# Distinct sources

#: where a step kernel's source holds its block size (``emit_cuda._bounds``, the thread's first cell or pair, the
#: stride between its cells)
_LAUNCH_CONSTANTS = (re.compile(r"__launch_bounds__\(\d+\)"), re.compile(r"blockIdx\.x \* \(\d+ \* \d+\)"),
                     re.compile(r"blockIdx\.x \* \d+ \+ threadIdx\.x"), re.compile(r"\bk \* \d+\b"))


def code_class(code: str) -> str:
    """The hash of ``code`` with its block size masked: sources that differ only there (16-bit storage sizes its
    block to the row) are one class. A spelling the masks miss only makes more classes."""
    for pattern in _LAUNCH_CONSTANTS:
        code = pattern.sub("<launch>", code)
    return hashlib.sha256(code.encode()).hexdigest()[:12]


@dataclasses.dataclass
class Source:
    """One distinct RawModule (code, options, name expressions) and everything that made it."""

    key: str                              # hash of the code, options and name expressions
    code: str
    options: tuple[str, ...]
    name_expressions: tuple[str, ...]
    requested: set = dataclasses.field(default_factory=set)      # kernels asked for by get_function
    sites: set = dataclasses.field(default_factory=set)          # RawModule call sites
    configs: list = dataclasses.field(default_factory=list)      # labels of the configurations that emit it
    wanted: set = dataclasses.field(default_factory=set)         # targets its configurations want a CUBIN for
    cubin: set = dataclasses.field(default_factory=set)          # targets it is taken to a CUBIN for

    @property
    def name(self) -> str:
        """The first configuration that emits it and the function that compiles it (a readable test id)."""
        site = min(self.sites)[2]
        return f"{self.configs[0]}:{site.split('.')[0]}"

    @property
    def code_class(self) -> str:
        return code_class(self.code)


def collect_sources() -> list[Source]:
    """Every distinct source of every LBM configuration and the FEM module, in the order first met. CUBIN targets:
    per target, one source of each code class that a configuration wants a CUBIN for at that target (the FEM
    module at every target)."""
    found: dict[str, Source] = {}

    def add(call: ModuleCall, label: str, wanted) -> None:
        key = hashlib.sha256("\0".join((call.code, repr(call.options), repr(call.name_expressions)))
                             .encode()).hexdigest()[:12]
        src = found.setdefault(key, Source(key, call.code, call.options, call.name_expressions))
        src.requested.update(call.requested)
        src.sites.add(call.site)
        if label not in src.configs:
            src.configs.append(label)
        src.wanted.update(wanted)

    for config in lbm_configs():
        for call in config.modules():
            add(call, config.label, config.cubin)
    for call in fem_modules():
        add(call, "fem", TARGETS)
    sources = list(found.values())
    for target in TARGETS:
        taken = set()
        for src in sources:
            if target in src.wanted and src.code_class not in taken:
                src.cubin.add(target)
                taken.add(src.code_class)
    return sources
