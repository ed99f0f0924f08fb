"""Every CUDA C source the CuPy backends emit, compiled by NVRTC on a machine without a GPU (issue 36).

The sources are what the backends hand CuPy, recorded on their own code path (tests/cuda_compile_util.py): the
LBM stepper of every shipped case x every LBM precision x both streamings, the boundary sets the shipped cases do not
use (characteristic outlet, absorbing layer, both) with both collision models, the 16-bit pair kernel's shape and the
register cap; the Bouzidi pre-pass of every precision; the FEM module with every name expression (every fused CG and
multigrid kernel, every type combination). The FP16C codec's C and the absorbing layer's C are compiled inside the
sources that include them.

Two depths, for two targets (sm_90: H200; sm_89: RTX 4090):

- the front end (``--fdevice-syntax-only``): every distinct source, both targets. What C++ can get wrong (a name,
  a type, a template argument, an attribute) fails here.
- a CUBIN (front end, NVVM, ptxas: the code CuPy would load): per target, one source of each code class (sources
  that differ only in the block size are one class) chosen by the configurations (``Config.cubin``): at sm_90 the
  shipped cases' sources, the characteristic outlet (BGK) and the characteristic outlet with the layer (TRT), one
  register-capped source per kind of step kernel, the Bouzidi pre-pass, the FEM module; at sm_89 the two-buffer
  sources of the shipped cases, the layer (BGK), the Bouzidi pre-pass, the FEM module. So every collision function
  and outlet rule of every precision and streaming reaches a CUBIN in the default suite. Each checks what the
  compiler made: the kernels the backend asks for by name are entries of the PTX and symbols of the CUBIN, the
  launch bounds and register caps reached the PTX (and ptxas kept the cap), the PTX targets the arch, the FP16C
  asm is in the FP16C code. The rest of the matrix (every other source and target) is ``test_cubin_rest``, marked
  ``slow`` (``bash scripts/test.sh --slow``).

And the launches: the CuPy LBM stepper and FEM ops run on the recording stand-in for cupy, and every kernel launch
they make must pass what the compiled kernel takes (argument count and types against the PTX parameters); the
stepper's CUDA graph capture is checked for structure (what it records, what a replay launches).

Skipped, with the reason, only where NVRTC cannot be loaded (``pip install -e '.[dev]'`` brings it).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from cuda_compile_util import (BOUNDARY_SETS, CASES, CHANNEL_CASE, ROOT, STREAMING, TARGETS, Config, case_setup,
                               collect_sources, compile_cuda, lbm_case_files, lbm_configs, lbm_policies, nvrtc_problem,
                               nvrtc_version, recorded_modules)

NVRTC_PROBLEM = nvrtc_problem()
pytestmark = pytest.mark.skipif(NVRTC_PROBLEM is not None, reason=f"NVRTC unavailable: {NVRTC_PROBLEM}")

SOURCES = collect_sources()

#: the number of distinct sources and of code classes the configurations emit (the docs quote them:
#: docs/design/ci_gpu_coverage.md); a change to the emitters or to the configurations changes them on purpose
DISTINCT_SOURCES = 65
CODE_CLASSES = 57

#: every step kernel's qualifier in the source: ``__launch_bounds__(B)`` or ``__maxnreg__(N)`` (emit_cuda._bounds)
_QUALIFIED = re.compile(r"__global__\s+void\s+(__launch_bounds__|__maxnreg__)\((\d+)\)\s+(\w+)\s*\(")


def _params(targets_of):
    return [pytest.param(src, arch, id=f"{arch}-{src.name}") for arch in TARGETS for src in SOURCES
            if arch in targets_of(src)]


@pytest.mark.parametrize("source, arch", _params(lambda src: TARGETS))
def test_every_source_passes_the_front_end(source, arch):
    out = compile_cuda(source.code, source.options, arch, source.name_expressions, front_end_only=True)
    assert out.ok and not out.errors(), f"{source.name} ({', '.join(source.configs)}) for {arch}:\n{out.log}"
    if source.configs != ["fem"]:       # the LBM sources declare nothing they do not use (NVRTC warning 177)
        unused = [line for line in out.log.splitlines() if "#177" in line]
        assert not unused, f"{source.name}: unused variables for {arch}:\n" + "\n".join(unused)


def _entry_directives(ptx: str) -> dict[str, str]:
    """Per kernel of the PTX, the text between its parameter list and its body (``.maxntid``, ``.maxnreg``...)."""
    out = {}
    for m in re.finditer(r"\.entry\s+([\w$]+)\s*\((.*?)\)(.*?)\{", ptx, re.S):
        out[m.group(1)] = m.group(3)
    return out


@pytest.mark.parametrize("source, arch", _params(lambda src: src.cubin))
def test_cubin(source, arch):
    _check_cubin(source, arch)


@pytest.mark.slow
@pytest.mark.parametrize("source, arch", _params(lambda src: set(TARGETS) - src.cubin))
def test_cubin_rest(source, arch):
    """The sources and targets the default suite takes only through the front end, to a CUBIN."""
    _check_cubin(source, arch)


def _check_cubin(source, arch):
    out = compile_cuda(source.code, source.options, arch, source.name_expressions)
    assert out.ok and not out.errors(), f"{source.name} ({', '.join(source.configs)}) for {arch}:\n{out.log}"
    assert f".target {arch}" in out.ptx
    assert out.cubin[:4] == b"\x7fELF", "NVRTC made no CUBIN"
    entries = set(out.entries())
    # every kernel the backend asks for by name is compiled (a name expression: its lowered name)
    wanted = {out.lowered.get(name, name) for name in source.requested}
    assert wanted and wanted <= entries, sorted(wanted - entries)
    assert all(name.encode() in out.cubin for name in wanted)
    # ptxas compiled each of them for this arch
    regs = out.registers()
    assert wanted <= set(regs), sorted(wanted - set(regs))
    assert re.findall(r"Compiling entry function '[^']+' for '(\w+)'", out.log) == [arch] * len(regs)
    # the step kernels' launch bounds / register caps reached the PTX, and ptxas kept the cap
    directives = _entry_directives(out.ptx)
    qualified = _QUALIFIED.findall(source.code)
    for kind, value, kernel in qualified:
        if kind == "__launch_bounds__":
            assert re.search(rf"\.maxntid\s+{value},\s*1,\s*1", directives[kernel]), (kernel, directives[kernel])
        else:
            assert re.search(rf"\.maxnreg\s+{value}\b", directives[kernel]), (kernel, directives[kernel])
            assert regs[kernel] <= int(value), (kernel, regs[kernel], value)
    if "__global__" in source.code and "lbm_step" in source.code:
        assert qualified, "no step kernel qualifier found: the pattern no longer matches emit_cuda._bounds"
    # the FP16C codec's multiply is inline PTX (fp16c.CUDA_SOURCE): in the FP16C code, nowhere else
    assert ("mul.rn.f32" in out.ptx) == ("fp16c_mul" in source.code)


# -- the launches: what the CuPy stepper passes each kernel against what the kernel takes ------------------------

def _arg_type(a) -> str:
    """The PTX parameter type a launch argument fills: CuPy passes an array as its device pointer and a NumPy scalar
    as its bytes (integers of one width as one type, see _param_type); a Python scalar would be CuPy's guess (never
    used by the backends), so it gets a type no parameter has."""
    if isinstance(a, np.ndarray):
        return "b64"
    if isinstance(a, np.generic) and a.dtype.kind in "iuf":
        return f"{'f' if a.dtype.kind == 'f' else 'b'}{8 * a.dtype.itemsize}"
    return f"python-{type(a).__name__}"


def _param_type(t: str) -> str:
    """A PTX parameter type with integers of one width as one (u32 / s32 / b32 -> b32)."""
    return t if t.startswith("f") else f"b{t[1:]}"


_PTX: dict = {}


def _ptx(module):
    """The PTX (compute_90: front end and NVVM) of a recorded RawModule, once per source."""
    key = (module.code, module.options, module.name_expressions)
    if key not in _PTX:
        out = compile_cuda(module.code, module.options, "compute_90", module.name_expressions)
        assert out.ok, out.log
        _PTX[key] = out
    return _PTX[key]


def check_launch(launch) -> None:
    """The launch's arguments are what its kernel's PTX takes, one for one and type for type; its block fits the
    kernel's ``__launch_bounds__`` / the 1024 threads of a block."""
    out = _ptx(launch.module)
    entry = out.lowered.get(launch.kernel, launch.kernel)
    params = out.params()[entry]
    got = [_arg_type(a) for a in launch.args]
    assert got == [_param_type(t) for t in params], (launch.kernel, got, params)
    threads = int(np.prod(launch.block))
    bounds = re.search(rf"__launch_bounds__\((\d+)\)\s+{re.escape(launch.kernel)}\(", launch.module.code)
    assert 0 < threads <= (int(bounds.group(1)) if bounds else 1024), (launch.kernel, launch.block)


def _same_launch(a, b) -> bool:
    """Same kernel of the same module, same shape, the very same arrays and equal scalars."""
    return (a.kernel == b.kernel and a.module is b.module and a.grid == b.grid and a.block == b.block
            and len(a.args) == len(b.args)
            and all(x is y if isinstance(x, np.ndarray) else x == y for x, y in zip(a.args, b.args)))


def _launch_configs():
    by_label = {c.label: c for c in lbm_configs()}
    both = BOUNDARY_SETS["characteristic+layer"]
    return [by_label["cylinder_2d1/fp16c/in-place"], by_label["cylinder_2d1/fp64/two-buffer"],
            by_label["channel-characteristic+layer-trt/fp32/in-place"],
            Config("channel-characteristic+layer-bgk-pairs/fp16s/two-buffer", CHANNEL_CASE, "fp16s",
                   ("lattice.streaming=two-buffer", "lattice.collision=bgk", *both), (("pairs", True),))]


@pytest.mark.parametrize("config", _launch_configs(), ids=lambda c: c.label)
def test_cupy_stepper_launches_match_the_compiled_kernels(config):
    """The CuPy stepper on the recording stand-in for cupy (tests/cuda_compile_util.py): two smooth-start steps, then
    three runs of two steps (the first launched directly, the second recorded as a CUDA graph and replayed, the third
    replayed), the moments and the force. Every launch passes what its compiled kernel takes; the graph holds the
    launches of a direct run, with the same arrays; the step kernels alternate as the layout says."""
    from hpcsolve.lbm.steppers import kernels_cupy
    from hpcsolve.lbm.flags import FLUID
    from hpcsolve.core.precision import POLICIES

    setup = case_setup(CASES / config.case, POLICIES[config.policy_name], config.overrides)
    setup.ramp_steps = 2
    with recorded_modules() as rec:
        st = kernels_cupy.CupyStepper(setup, **dict(config.options))
        st.step(2)                                # the smooth start: one step at a time, the velocity scaled first
        ramp = len(rec.launches)
        for _ in range(3):
            st.step(2)
        steps = rec.launches[ramp:]
        st.macroscopic_device()
        st.force(setup.flags != FLUID)
    assert st.time_step == 8
    for launch in rec.launches:
        if launch.module is None:                 # the ElementwiseKernel that scales the boundary velocities
            assert launch.kernel == "hpcsolve_lbm_scale_velocity" and len(launch.args) == 3
        else:
            check_launch(launch)
    names = [x.kernel for x in rec.launches]
    assert names.count("hpcsolve_lbm_scale_velocity") == 2                      # once per ramp step
    assert names[-2:] == [st.layouts[st.parity].reads.moments_kernel, "lbm_force"]
    # the graph: one capture, of the two steps the first run launched directly; both replays launch it
    assert len(rec.graphs) == 1
    graph = rec.graphs[0]
    per_run = len(steps) // 3
    assert len(steps) == 3 * per_run == 3 * len(graph)
    direct, replays = steps[:per_run], steps[per_run:]
    assert not any(x.replayed for x in direct) and all(x.replayed for x in replays)
    assert all(_same_launch(a, b) for a, b in zip(direct, graph))
    assert all(_same_launch(a, b) for a, b in zip(replays, graph + graph))
    # the step kernels of a run: two buffers swap (A, B) -> (B, A); in place the even and odd kernels alternate
    kernels = [x for x in direct if x.kernel.startswith("lbm_step")]
    assert len(kernels) == 2
    if st.in_place:
        assert [x.kernel for x in kernels] == ["lbm_step_aa_even", "lbm_step_aa_odd"]
        assert kernels[0].args[0] is kernels[1].args[0]
    else:
        assert kernels[0].kernel == kernels[1].kernel == ("lbm_step_pair" if st.pairs else "lbm_step")
        assert kernels[0].args[0] is kernels[1].args[1] and kernels[0].args[1] is kernels[1].args[0]
    prepass = [x for x in direct if x.kernel.startswith("bouzidi")]
    assert len(prepass) == (4 if st.bouzidi is not None else 0)         # gather and scatter before each step


def test_cupy_fem_ops_launch_every_compiled_kernel_with_its_signature():
    """Every kernel method of the FEM's CupyOps, in every working / storage type it takes, on the recording stand-in
    for cupy: each launch passes what its compiled template instance takes, the instances launched are exactly the
    module's name expressions (none missing from ``_names()``, none compiled in vain), and a captured block
    replays the launches it recorded."""
    from types import SimpleNamespace

    from hpcsolve.fem.linalg import kernels_cupy

    f16, f32, f64 = np.float16, np.float32, np.float64
    n = 8
    with recorded_modules() as rec:
        ops = kernels_cupy.CupyOps(graphs=True)
        ws = ops.zeros(16, f64)

        def vec(dt, size=n):
            return ops.zeros(size, dt)

        def index():
            return ops.to_device(np.arange(n + 1, dtype=np.int32))

        A = SimpleNamespace(n=n, indptr=index(), indices=index(),
                            vals={np.dtype(f32): vec(f32), np.dtype(f64): vec(f64)})
        for T in (f32, f64):
            ops.spmv_dot(A, vec(T), vec(T), ws, 0)
            ops.dot(vec(T), vec(T), ws, 1)
            ops.precondition(vec(T), vec(T), vec(T), ws, 2)
            ops.precondition_init(vec(T), vec(T), None, ws, 2, 3)
            ops.update_r(vec(T), vec(T), vec(T), ws, 0, 1, 2, 3)
            ops.update_xp(vec(T), vec(T), vec(T), vec(T), ws, 0, 1, (1, 2, 1.0))
            ops.replace_residual(A, vec(f64), vec(f64), vec(T), vec(T), None, ws, 2, 3)
            ops.fold(vec(f64), vec(T))
            for U in (f32, f64):
                ops.residual(A, vec(T), vec(T), vec(U), vec(T), ws, 2, 3)
                ops.axpy((0, 1, 1.0), vec(T), vec(U), ws)
            for S in (f16, f32, f64):
                csr = SimpleNamespace(rows=n, indptr=index(), indices=index(), vals=vec(S), rowscale=None, offsets=None,
                                      ndiag=0)
                dia = SimpleNamespace(rows=n, indptr=None, indices=None, vals=vec(S, 3 * n), rowscale=vec(T),
                                      offsets=ops.to_device(np.array([-1, 0, 1], np.int32)), ndiag=3)
                for M in (csr, dia):
                    ops.csr_apply(M, vec(T), vec(T), 1.0, vec(T), 0.5)
                    ops.mg_smooth(M, vec(T), vec(T), vec(T), vec(T), vec(T), 0.5, 0.25, False)
                    ops.mg_smooth(M, None, vec(T), vec(T), vec(T), vec(T), 0.5, 0.25, True)
        ops.block_start(ws, 0, 1, 2, 4)
        ops.block_end(ws, 0, 2, 3)
        ops.check_matrix(n, index(), index(), vec(f64), vec(f64), ws, 8)
        direct = len(rec.launches)
        x, y = vec(f32), vec(f32)
        replay = ops.capture(lambda: (ops.dot(x, y, ws, 1), ops.axpy((0, 1, 1.0), x, y, ws)))
        assert len(rec.launches) == direct          # recorded, not run
        replay()
        replay()
    (module,) = rec.modules
    assert {x.kernel for x in rec.launches} == set(module.name_expressions)
    for launch in rec.launches:
        check_launch(launch)
    (graph,) = rec.graphs
    assert [x.kernel for x in graph] == ["dot<float>", "axpy<float,float>"]
    assert all(_same_launch(a, b) for a, b in zip(rec.launches[direct:], graph + graph))


# -- what the matrix holds ---------------------------------------------------------------------------

def test_the_matrix_holds_every_configuration():
    """The configurations reach every precision x streaming x boundary set x collision function, every shipped LBM
    case, both kernels of the Bouzidi pre-pass, the pair kernel and the register cap; every source is compiled at
    least to the front end for every target, and each code class that the configurations want a CUBIN for gets one."""
    from hpcsolve.core import fp16c
    from hpcsolve.lbm.boundaries.layer import C_SOURCE as LAYER_C

    assert len(SOURCES) == DISTINCT_SOURCES
    assert len({s.code_class for s in SOURCES}) == CODE_CLASSES
    labels = {label for s in SOURCES for label in s.configs}
    for policy in lbm_policies():
        for path in lbm_case_files():
            for s in STREAMING:
                assert f"{path.stem}/{policy.name}/{s}" in labels
        for bname in BOUNDARY_SETS:
            for s in STREAMING:
                assert any(label.startswith(f"channel-{bname}-") and label.endswith(f"/{policy.name}/{s}")
                           for label in labels), (bname, policy.name, s)
    # every precision x streaming: the four collision functions (helper_plan.collide_values, traced from physics.py)
    # and both outlet rules (the characteristic one looks up a reference outflow, urx / ury), each in a source that
    # is taken to a CUBIN at one of the targets
    for policy in lbm_policies():
        for s in STREAMING:
            texts = [src.code for src in SOURCES if src.cubin and "lbm_step" in src.code
                     and any(c.endswith(f"/{policy.name}/{s}") for c in src.configs)]
            kinds = {(re.search(r"// (BGK|TRT) collision of one cell", t).group(1), "layer_coefficient" in t)
                     for t in texts}
            assert kinds == {("BGK", False), ("BGK", True), ("TRT", False), ("TRT", True)}, (policy.name, s, kinds)
            assert {"real_t urx, ury;" in t for t in texts} == {True, False}, (policy.name, s)
    step = [s for s in SOURCES if "lbm_step" in s.requested or "lbm_step_pair" in s.requested
            or "lbm_step_aa_even" in s.requested]
    assert any("lbm_step_pair" in s.requested for s in step)           # the pair shape is what a stepper ran
    assert any("__maxnreg__(40)" in s.code for s in step)
    assert sum(LAYER_C in s.code for s in SOURCES) >= 4 * len(lbm_policies())
    assert all(fp16c.CUDA_SOURCE in s.code for s in SOURCES if any("/fp16c/" in c for c in s.configs))
    bouzidi = [s for s in SOURCES if s.requested == {"bouzidi_gather", "bouzidi_scatter"}]
    assert len(bouzidi) == len(lbm_policies())
    fem = [s for s in SOURCES if s.configs == ["fem"]]
    assert len(fem) == 1 and fem[0].requested == set(fem[0].name_expressions) and fem[0].name_expressions
    for arch in TARGETS:
        assert {s.code_class for s in SOURCES if arch in s.wanted} == {s.code_class for s in SOURCES if arch in s.cubin}


#: every CuPy kernel constructor in the package; those without a recorded RawModule are listed with the reason
_CONSTRUCTOR = re.compile(r"cupy\.(RawModule|RawKernel|ElementwiseKernel|ReductionKernel)\(")
NOT_COMPILED_HERE = {
    ("hpcsolve/lbm/steppers/kernels_cupy.py", "ElementwiseKernel"):
        "CuPy writes this kernel's C from its own templates (out = (T)(u * s)); without CuPy there is no source",
}


def test_every_cupy_kernel_constructor_is_in_the_matrix():
    """Grep the package for CuPy kernel constructors: each RawModule call site is one the matrix recorded (a new
    one fails here until its sources are compiled), the rest are named in NOT_COMPILED_HERE with the reason."""
    found = set()
    for path in sorted((ROOT / "hpcsolve").rglob("*.py")):
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            for m in _CONSTRUCTOR.finditer(line):
                found.add((str(path.relative_to(ROOT)), lineno, m.group(1)))
    recorded = {(f, line) for s in SOURCES for f, line, _ in s.sites}
    raw = {(f, line) for f, line, kind in found if kind == "RawModule"}
    assert raw == recorded, (raw, recorded)
    others = {(f, kind) for f, _, kind in found if kind != "RawModule"}
    assert others == set(NOT_COMPILED_HERE), others


def test_nvrtc_knows_both_targets():
    from cuda.bindings import nvrtc

    err, archs = nvrtc.nvrtcGetSupportedArchs()
    assert {90, 89} <= set(archs), archs
    assert nvrtc_version() >= (12, 4)        # __maxnreg__ (emit_cuda._bounds) needs CUDA 12.4


def test_a_compile_error_fails_with_the_log():
    """The harness does not pass a broken source: NVRTC's error and its line come back."""
    out = compile_cuda('extern "C" __global__ void k(float* a) { a[0] = undeclared_name; }', ("--std=c++17",),
                       TARGETS[0])
    assert not out.ok and any("undeclared_name" in line for line in out.errors()), out.log
    assert out.cubin == b"" and out.entries() == []



def test_a_clean_compile_leaves_the_interpreters_shared_bytes_alone():
    """NVRTC writes its log, PTX and CUBIN into the buffers the harness hands it. A clean compile's log is one NUL byte;
    a buffer made as b" " * 1 is the interpreter's shared one-byte b" ", and the NUL written into it made every b" " of
    the process b"\\x00" (an .npy header padded with b" " then failed to parse in a later test). The buffers are fresh."""
    out = compile_cuda('extern "C" __global__ void k(float* a) { a[0] = 1.0f; }', ("--std=c++17",), TARGETS[0],
                       front_end_only=True)
    assert out.ok and out.log == "", out.log          # an empty log: NVRTC's log size is 1 (its NUL)
    assert (b" " * 3) == bytes([32, 32, 32]) and b" "[0] == 32


if __name__ == "__main__":        # the inventory, for docs/design/ci_gpu_coverage.md
    for arch in TARGETS:
        print(arch, "CUBIN:", sum(arch in s.cubin for s in SOURCES), "of", len(SOURCES))
    print(Path(__file__).name, len(SOURCES), "sources,", len({s.code_class for s in SOURCES}), "code classes")


@pytest.mark.parametrize("arch", TARGETS)
def test_the_smoothed_aggregation_kernels_compile(arch):
    """The AMG set-up's own CUDA C (hpcsolve/fem/linalg/precond/sa_device.py: the row maxima and the fused MIS(2)
    round, which CuPy compiles through xp.RawKernel / xp.RawModule at the first set-up): each compiles to a CUBIN
    with the kernels the set-up looks up."""
    from hpcsolve.fem.linalg.precond import sa_device

    for src, names in ((sa_device._ROW_MAX_SRC, ["row_max"]), (sa_device._ROW_MAX_EDGES_SRC, ["row_max_edges"]),
                       (sa_device._MIS_ROUND_SRC, ["mis_m1", "mis_update"])):
        result = compile_cuda(src, (), arch)
        assert result.ok, result.log
        for name in names:
            assert f"Compiling entry function '{name}'" in result.log, (name, result.log[:500])
