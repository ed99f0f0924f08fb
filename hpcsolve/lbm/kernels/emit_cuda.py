"""The CUDA C emitter of the LBM kernel plan (``kernel_plan.py``): the source ``kernels_cupy`` compiles with CuPy.

``physics.physics_for(dtype)`` is *traced*: its functions (moments, equilibrium, BGK/TRT collision, the boundary
rules' formulas) are called with symbolic values that record every ``+ - * /`` as one line of CUDA C, in the order
the NumPy reference evaluates them, so the reference and the kernel evaluate the same expressions (the GPU may
contract a*b+c into an FMA) and no physics constant is typed twice. Positions come from the plan's layouts, the
boundary rules' pieces from ``boundaries/``, population loads and stores from ``population_code.cuda_code``.

The step and moments kernels are described once in ``step_plan`` (the plan's statement vocabulary,
``kernel_plan.Let`` / ``If`` / ``Unrolled`` / ...) and printed here by ``print_cuda.CPrinter``; the pull functions,
the prelude of device helpers and the pair kernel are still C templates of this module (twins in ``emit_numba``).

- :func:`kernel_source`: the step kernels of the step layouts (``lbm_step``, or ``lbm_step_aa_even`` / ``_odd``),
  the 16-bit pair kernel ``lbm_step_pair`` (two buffers), the moments of each state layout and ``lbm_force``;
- :func:`bouzidi_source`: the interpolated bounce-back pre-pass (``bouzidi.GATHER`` / ``SCATTER``).

Its twin for Numba is ``emit_numba``; neither imports the other.
"""

from __future__ import annotations

import functools

import numpy as np

from hpcsolve.lbm.boundaries import bouzidi
from hpcsolve.lbm.kernels import kernel_plan
from hpcsolve.lbm import lattice, physics
from hpcsolve.lbm.boundaries import link_rules
from hpcsolve.lbm.boundaries.layer import ARGS as LAYER_ARGS, C_SOURCE as LAYER_C
from hpcsolve.lbm.flags import FLUID
from hpcsolve.lbm.steppers.gpu_common import BOUNDARY_BIT
from hpcsolve.lbm.kernels.kernel_plan import link_constants
from hpcsolve.lbm.kernels.population_code import cuda_code
from hpcsolve.lbm.kernels import helper_plan, step_plan
from hpcsolve.lbm.kernels.print_cuda import C_ARG, CPrinter, bounds
from hpcsolve.lbm.kernels.trace_c import Sym as _Sym, Tracer as _Tracer


# Source generation

def layer_source(layer: bool) -> str:
    """The absorbing layer's ``layer_coefficient`` (``boundaries.layer.C_SOURCE``) where the kernels have one."""
    return LAYER_C if layer else ""


def _prelude_c(code) -> str:
    """Header, the real_t / store_t typedefs and the population load / store of every kernel source;
    the load and store expressions are the policy's (``population_code.cuda_code``)."""
    return (f"{code.header}\ntypedef {code.real_t} real_t;\ntypedef {code.store_t} store_t;\n"
            f"__device__ __forceinline__ real_t load_pop(const store_t v) {{ return {code.decode('v')}; }}\n"
            f"__device__ __forceinline__ store_t store_pop(const real_t v) {{ return {code.encode('v')}; }}\n")


# ------------------------------------------------------------------------------------------------
# Emitting the kernel plan (hpcsolve/lbm/kernels/kernel_plan.py) as CUDA C

def _emit_ops(ops, P, code, layout, env: dict, prefix: str) -> tuple[list[str], dict]:
    """C statements of a kernel piece (``kernel_plan.Op``s); ``env`` maps the piece's names to C
    expressions (str) or constants (the link constants, traced as literals). Returns the statements and
    the updated names."""
    tr = _Tracer(code.real_t, code.suffix, prefix)
    env = dict(env)
    for op in ops:
        if op.kind == "lookup":
            a, b = op.out
            tr.lines.append(f"real_t {a}, {b};")
            tr.lines.append(f"boundary_velocity(vel_cells, vel_u, n_vel, {op.args[0]}, &{a}, &{b});")
            env[a], env[b] = a, b
        elif op.kind == "own_velocity":
            ux, uy = op.out
            fetch = ("own_velocity(A, N, cell, " if layout.own_velocity == "stored"
                     else "outlet_velocity(out_cells, own_u, n_out, cell, ")
            tr.lines.append(f"if (!have_own) {{ {fetch}&{ux}, &{uy}); have_own = true; }}")
            env[ux], env[uy] = ux, uy
        elif op.kind == "physics":
            vals = [env.get(a, a) for a in op.args]      # a name of the piece, or a C expression (a[k])
            args = [_Sym(tr, v) if isinstance(v, str) else v for v in vals]
            out = getattr(P, op.fn)(*args)
            outs = out if isinstance(out, tuple) else (out,)
            env.update({name: tr.operand(v) for name, v in zip(op.out, outs)})
        elif op.kind == "load":
            (name,), (array, index) = op.out, op.args
            tr.lines.append(f"const real_t {name} = load_pop({array}[{index}]);")
            env[name] = name
        elif op.kind == "widen":
            (name,), (value,) = op.out, op.args
            tr.lines.append(f"const double {name} = (double){env.get(value, value)};")
            env[name] = name
        elif op.kind == "expr":
            (name,), (text,) = op.out, op.args
            tr.lines.append(f"const {'double' if op.fn == 'double' else 'real_t'} {name} = {text};")
            env[name] = name
        elif op.kind == "store":
            array, index, value = op.args
            tr.lines.append(f"{array}[{index}] = store_pop({env.get(value, value)});")
        elif op.kind == "copy":
            dst, di, src, si = op.args
            tr.lines.append(f"{dst}[{di}] = {src}[{si}];")
        elif op.kind == "atomic_add":
            array, index, value = op.args
            tr.lines.append(f"atomicAdd(&{array}[{index}], {env.get(value, value)});")
        else:
            raise ValueError(f"unknown kernel op {op.kind!r}")
    return tr.lines, env


def _pull_cell_c(layout, P, code, rules) -> str:
    """``pull_cell_<layout>``: h[0..8] = the populations arriving at fluid cell x (pull streaming, and the
    boundary rules on links from non-fluid cells), positions from the step layout."""
    Q = lattice.Q
    interior = [f"h[{i}] = load_pop(A[{layout.interior(i)}]);" for i in range(Q)]
    links = []
    for i in range(1, Q):
        const = link_constants(P, i)
        branches = []
        for r, rule in enumerate(rules):
            lines, env = _emit_ops(rule.piece, P, code, layout, {"hop": "hop", **const}, f"{rule.name[0]}{i}_")
            test = "} else {" if r == len(rules) - 1 else f"{'} else ' if r else ''}if (fs == {rule.flag}) {{"
            branches.append(f"        {test}\n          {' '.join(lines)}\n          h[{i}] = {env['h']};")
        links.append(f"""{{
      const long long s = {kernel_plan.SOURCE[i]};
      const int fs = flags[s] & 0x7f;
      if (fs == {FLUID}) {{
        h[{i}] = load_pop(A[{layout.pull(i)}]);
      }} else {{
        const real_t hop = load_pop(A[{layout.hop(i)}]);
{chr(10).join(branches)}
        }}
      }}
    }}""")
    table = layout.own_velocity == "table"
    extra = ("const long long* __restrict__ out_cells, const real_t* __restrict__ own_u, const int n_out,\n    "
             if table else "")
    nl = "\n    "
    return f"""
// Pull streaming + boundary rules for one fluid cell, {layout.name} step: h[0..8] = populations arriving at (x, y).
__device__ __forceinline__ void pull_cell_{layout.tag}(const store_t* __restrict__ A,
    const unsigned char* __restrict__ flags, const long long* __restrict__ vel_cells, const real_t* __restrict__ vel_u,
    const int n_vel, {extra}const long long N, const int nx, const int x, const long long row, const long long rowm,
    const long long rowp, const int code, real_t* h) {{
  const long long cell = row + x;
  const int xm = (x == 0) ? nx - 1 : x - 1;
  const int xp = (x == nx - 1) ? 0 : x + 1;
  if (!(code & {BOUNDARY_BIT})) {{
    {nl.join(interior)}
  }} else {{
    bool have_own = false;
    real_t own_ux = 0, own_uy = 0;
    h[0] = load_pop(A[cell]);
    {nl.join(links)}
  }}
}}
"""


def _layer_c(layer: bool) -> tuple[str, str, str]:
    """(kernel parameters, collide_values / collide_store parameter, its argument at cell (x, y)) of the absorbing
    layer (``boundaries.layer``), empty strings without one."""
    if not layer:
        return "", "", ""
    return ("".join(f", const real_t {a}" for a in LAYER_ARGS), ", const real_t layer",
            ", layer_coefficient({x}, {y}, " + ", ".join(LAYER_ARGS) + ")")


def list_kernel_c(kernel, P, code) -> str:
    """A link-list kernel of ``kernel_plan.ListKernel`` as CUDA C (one thread per list entry k)."""
    lines, _ = _emit_ops(kernel.body, P, code, None, {}, f"{kernel.name}_")
    args = ", ".join(f"{C_ARG[kind]} {name}" for name, kind in kernel.args)
    nl = "\n    "
    return f"""
// {kernel.doc}
extern "C" __global__ void {kernel.name}({args}, const long long n) {{
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) {{
    {nl.join(lines)}
  }}
}}
"""


def _helpers_c(code, P, collision: str, layer: bool) -> str:
    """The prelude of a step source: the population code, the hash-table lookups of the boundary cells, the outlet
    rule's own velocity, the absorbing layer's coefficient and the traced collision (``collide_values``,
    ``collide_store``), described in ``helper_plan`` / ``step_plan``."""
    printer = CPrinter(P, code)
    helpers = "\n".join(printer.function_text(f) for f in (
        helper_plan.table_home(), helper_plan.boundary_velocity(), step_plan.own_velocity(),
        helper_plan.outlet_index(), helper_plan.outlet_velocity()))
    collide = "\n".join(CPrinter(P, code).function_text(f) for f in (
        helper_plan.collide_values(collision, layer), helper_plan.collide_store(collision, layer, code.stochastic)))
    return f"{_prelude_c(code)}\n{helpers}\n{layer_source(layer)}\n{collide}"


@functools.lru_cache(maxsize=None)
def kernel_source(policy, collision: str, cpt: int = 1, block_x: int = 256, in_place: bool = False,
                  characteristic: bool = False, layer: bool = False, max_registers: int | None = None) -> str:
    """CUDA C of the step, moments and force kernels for one policy and collision model;
    ``cpt`` cells per thread, ``block_x`` threads per block (both along x); ``in_place``: the AA-pattern
    step kernels ``lbm_step_aa_even`` / ``_odd`` and ``lbm_moments_odd`` (hpcsolve/lbm/steppers/inplace.py) instead of
    ``lbm_step``; ``characteristic``: outlet links look up their reference outflow
    (``boundaries.outlet.characteristic_outlet``), else the outlet rule runs at drho_w = 0; ``layer``: the
    collision adds the absorbing layer's bulk relaxation (``boundaries.layer``; the kernels take its four
    arguments after omega_minus); ``max_registers``: the step kernels' register cap (``__maxnreg__``). Emitted from the
    plan (``kernel_plan.step_layouts``, ``boundaries.link_rules``)."""
    code = cuda_code(policy)
    P = physics.physics_for(np.dtype(policy.compute))
    rules = link_rules(characteristic)
    layouts = kernel_plan.step_layouts(in_place)
    parts = [_helpers_c(code, P, collision, layer)]
    for layout in layouts:
        parts.append(_pull_cell_c(layout, P, code, rules))
        step = step_plan.step_kernel(layout, 1 if layout.in_place else cpt, block_x, collision, layer)
        parts.append(CPrinter(P, code, layer, block_x, max_registers).kernel_text(step))
    if not in_place and code.pair_words is not None:
        parts.append(_pair_kernel_c(block_x, code, layer, max_registers))
    for state in dict.fromkeys(layout.reads for layout in layouts):     # the state layouts a step starts from
        parts.append(CPrinter(P, code).kernel_text(step_plan.moments_kernel(state)))
    parts.append(list_kernel_c(kernel_plan.FORCE_KERNEL, P, code))
    return "".join(parts)


def _pair_loads_stores_c(code, w) -> tuple[list[str], str, list[int]]:
    """The pair kernel's word loads (with the exchange of the neighbouring halves), its packed stores and the
    directions whose sources are a neighbour's half (``kernel_plan.PAIR_PULLS``), for the words ``w``."""
    Q = lattice.Q
    h = code.unscale     # the halves are widened to float by __high2float / __low2float (fp16c_high / fp16c_low)
    # the raw words are loaded and passed between lanes (as the Numba emitter does), then each half widened
    # once: the edge lane's own load of the neighbouring word replaces the shuffled one before any widening
    def half(i, word_half):             # h of (word, half) of kernel_plan.PairPull: own word u{i}, neighbour's n{i}
        word, hh = word_half
        return h(f"{w['high' if hh == 'hi' else 'low']}({'u' if word == 'own' else 'n'}{i})")

    loads = []
    for i, pull in enumerate(kernel_plan.PAIR_PULLS):
        base = f"A2 + {i} * NP + {pull.row}"
        loads.append(f"const {w['word']} u{i} = ({base})[px];")
        if pull.neighbour:
            var, shfl, edge, at = (("up", "__shfl_up_sync", "lane == 0", "pm") if pull.neighbour < 0
                                   else ("dn", "__shfl_down_sync", "last", "pp"))
            loads.append(f"{{ const {w['word']} {var} = {shfl}(0xffffffffu, u{i}, 1); "
                          f"n{i} = {edge} ? ({base})[{at}] : {var}; }}")
        loads.append(f"ha[{i}] = {half(i, pull.a)}; hb[{i}] = {half(i, pull.b)};")
    shifted = [i for i, pull in enumerate(kernel_plan.PAIR_PULLS) if pull.neighbour]
    # __floats2half2_rn rounds to nearest as store_pop does; the pair only gets the policy's scale
    if code.stochastic:     # fp16c: stochastic rounding with the two cells' seeds (their pre-collision rest populations)
        stores = "\n      ".join(
            [code.seed("sa", "ha[0]", "row + x"), code.seed("sb", "hb[0]", "row + x + 1")]
            + [f"B2[{i} * NP + prow + px] = {code.pack_step(f'oa[{i}]', f'ob[{i}]', i, 'sa', 'sb')};"
               for i in range(Q)])
    else:
        stores = "\n      ".join(f"B2[{i} * NP + prow + px] = {w['pack']}({code.scale(f'oa[{i}]')}, "
                               f"{code.scale(f'ob[{i}]')});" for i in range(Q))
    return loads, stores, shifted


def _pair_kernel_c(block_x: int, code, layer: bool = False, max_registers: int | None = None) -> str:
    """CUDA C of ``lbm_step_pair`` (16-bit storage, nx even): each thread updates the two adjacent
    cells (x, x + 1), x even. Per population it loads one aligned 4-byte ``__half2`` word of the
    source row, (g[x], g[x + 1]), instead of two 2-byte values, and stores one packed word
    (``__floats2half2_rn``, the same round-to-nearest as ``store_pop``). A population pulled from
    x - 1 (c_x = +1) or x + 2 (c_x = -1) is the other half of the neighbouring thread's word: the raw
    word is passed by a warp shuffle, the first / last lane of a warp (and the pair at the periodic wrap,
    pair index modulo nx / 2) loads it itself, and only then is the half widened (once per value). So
    DRAM sees each 4-byte word once. Every lane
    executes the loads and shuffles (inactive lanes on a clamped pair); pairs with a boundary cell
    (flag bit 7, or a non-fluid cell) then take the per-cell path (``pull_cell_step`` + ``collide_store``)
    as ``lbm_step`` does. Bytes per cell per step: unchanged (37)."""
    Q = lattice.Q
    lay_params, _, lay_arg = _layer_c(layer)
    w = code.pair_words
    loads, stores, shifted = _pair_loads_stores_c(code, w)
    nl = "\n    "
    pair_locals = "\n".join(CPrinter(None, code).block(helper_plan.pair_locals(), 1))
    return f"""{w['prelude']}
// 16-bit storage, nx even: two adjacent cells per thread with {w['word']} loads and stores (see
// kernels_cupy._pair_kernel_c). Bytes per cell per step as lbm_step: 18 * 2 + 1 = 37.
extern "C" __global__ void {bounds(block_x, max_registers)}
lbm_step_pair(const {w['elem']}* __restrict__ A, {w['elem']}* __restrict__ B, const unsigned char* __restrict__ flags,
              const long long* __restrict__ vel_cells, const real_t* __restrict__ vel_u, const int n_vel,
              const int nx, const int ny, const real_t omega_plus, const real_t omega_minus{lay_params}) {{
  const int npairs = nx >> 1;
  const int p_raw = blockIdx.x * {block_x} + threadIdx.x;
  const bool active = p_raw < npairs;
  const int px = active ? p_raw : npairs - 1;        // inactive lanes still join the shuffles
  const int lane = threadIdx.x & 31;
  const bool last = (lane == 31) || (px == npairs - 1);
{pair_locals}
  const {w['word']}* __restrict__ A2 = reinterpret_cast<const {w['word']}*>(A);
  real_t ha[{Q}], hb[{Q}];
  {w['word']} {', '.join(f'n{i}' for i in shifted)};
  {nl.join(loads)}
  if (!active) return;
  const uchar2 fl = *reinterpret_cast<const uchar2*>(flags + row + x);
  if (fl.x == {FLUID} && fl.y == {FLUID}) {{
    {w['word']}* __restrict__ B2 = reinterpret_cast<{w['word']}*>(B);
    real_t oa[{Q}], ob[{Q}];
    collide_values(ha, oa, omega_plus, omega_minus{lay_arg.format(x="x", y="y")});
    collide_values(hb, ob, omega_plus, omega_minus{lay_arg.format(x="x + 1", y="y")});
    {stores}
  }} else {{
#pragma unroll
    for (int k = 0; k < 2; ++k) {{
      const int code = k ? fl.y : fl.x;
      if ((code & 0x7f) == {FLUID}) {{
        real_t h[{Q}];
        pull_cell_step(A, flags, vel_cells, vel_u, n_vel, N, nx, x + k, row, rowm, rowp, code, h);
        collide_store(h, B, N, row + x + k, omega_plus, omega_minus{lay_arg.format(x="x + k", y="y")});
      }}
    }}
  }}
}}
"""


@functools.lru_cache(maxsize=None)
def bouzidi_source(policy) -> str:
    """CUDA C of the interpolated bounce-back pre-pass for one policy: the list kernels ``bouzidi.GATHER``
    (link value = ``physics.interpolated_bounce_back`` of the two stored populations, traced like the step
    kernel, into V) and ``bouzidi.SCATTER`` (V -> the links' slots). Two launches per step instead of the
    ~15 array operations of the NumPy-style pre-pass (whose launch overhead, not its bytes, dominated small
    grids: 180 us per step on the 2D-1 cylinder at D = 80, H200)."""
    code = cuda_code(policy)
    P = physics.physics_for(np.dtype(policy.compute))
    return _prelude_c(code) + "".join(list_kernel_c(k, P, code) for k in (bouzidi.GATHER, bouzidi.SCATTER))
