"""The CUDA C emitter of the LBM kernel plan (``kernel_plan.py``): the source ``kernels_cupy`` compiles with CuPy.

``physics.physics_for(dtype)`` is *traced*: its functions (moments, equilibrium, BGK/TRT collision, the boundary
rules' formulas) are called with symbolic values that record every ``+ - * /`` as one line of CUDA C, in the order
the NumPy reference evaluates them, so the reference and the kernel evaluate the same expressions (the GPU may
contract a*b+c into an FMA) and no physics constant is typed twice. Positions come from the plan's layouts, the
boundary rules' pieces from ``boundaries/``, population loads and stores from ``population_code.cuda_code``.

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
from hpcsolve.lbm.kernels.cell_table import HASH_MULT
from hpcsolve.lbm.flags import FLUID, WALL
from hpcsolve.lbm.steppers.gpu_common import BOUNDARY_BIT
from hpcsolve.lbm.kernels.kernel_plan import link_constants
from hpcsolve.lbm.kernels.population_code import cuda_code


# ------------------------------------------------------------------------------------------------
# Tracing physics.py into straight-line CUDA C

class _Tracer:
    """Records arithmetic on symbolic values as CUDA C statements ``const real_t <prefix>tN = a op b;``."""

    def __init__(self, real_t: str, suffix: str, prefix: str):
        self.real_t = real_t
        self.suffix = suffix          # 'f' for float literals
        self.prefix = prefix          # keeps temporaries of separate traces apart
        self.lines: list[str] = []
        self.count = 0

    def literal(self, value) -> str:
        v = float(value)
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("non-finite constant in physics")
        text = repr(v)                # shortest repr of the (dtype-exact) double: an exact literal
        if "e" not in text and "." not in text:
            text += ".0"
        return f"({text}{self.suffix})"

    def operand(self, value) -> str:
        if isinstance(value, _Sym):
            return value.name
        return self.literal(value)

    def emit(self, expr: str) -> "_Sym":
        name = f"{self.prefix}t{self.count}"
        self.count += 1
        self.lines.append(f"const {self.real_t} {name} = {expr};")
        return _Sym(self, name)


class _Sym:
    """A symbolic compute-dtype scalar; NumPy scalars defer to its reflected operators."""

    __array_ufunc__ = None          # np.float32(2) * sym -> sym.__rmul__

    def __init__(self, tracer: _Tracer, name: str):
        self.t = tracer
        self.name = name

    def _bin(self, other, op, reflected=False):
        a, b = self.name, self.t.operand(other)
        if reflected:
            a, b = b, a
        return self.t.emit(f"{a} {op} {b}")

    def __add__(self, o): return self._bin(o, "+")
    def __radd__(self, o): return self._bin(o, "+", True)
    def __sub__(self, o): return self._bin(o, "-")
    def __rsub__(self, o): return self._bin(o, "-", True)
    def __mul__(self, o): return self._bin(o, "*")
    def __rmul__(self, o): return self._bin(o, "*", True)
    def __truediv__(self, o): return self._bin(o, "/")
    def __rtruediv__(self, o): return self._bin(o, "/", True)
    def __neg__(self): return self.t.emit(f"-{self.name}")

    def __pow__(self, o):
        if float(o) != 0.5:
            raise ValueError(f"physics traces ** 0.5 only (sqrt), got ** {o}")
        return self.t.emit(f"sqrt({self.name})")
    def __pos__(self): return self


def _trace(fn, real_t: str, suffix: str, inputs: dict[str, str], prefix: str):
    """Call ``fn(**symbols)`` on symbolic inputs (keyword -> C variable name); return the recorded
    C statements and the C expressions of its outputs (a tuple or one value)."""
    tr = _Tracer(real_t, suffix, prefix)
    out = fn(**{k: _Sym(tr, v) for k, v in inputs.items()})
    outs = out if isinstance(out, tuple) else (out,)
    return tr.lines, [tr.operand(o) for o in outs]


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


def _collision_fn(P, collision, layer: bool = False):
    if layer and collision == "trt":       # the absorbing layer's extra bulk relaxation (boundaries/layer.py)
        def collide(h0, h1, h2, h3, h4, h5, h6, h7, h8, omega_plus, omega_minus, layer):
            return P.collide_trt_layer((h0, h1, h2, h3, h4, h5, h6, h7, h8), omega_plus, omega_minus, layer)
    elif layer:
        def collide(h0, h1, h2, h3, h4, h5, h6, h7, h8, omega_plus, omega_minus, layer):
            return P.collide_bgk_layer((h0, h1, h2, h3, h4, h5, h6, h7, h8), omega_plus, layer)
    elif collision == "trt":
        def collide(h0, h1, h2, h3, h4, h5, h6, h7, h8, omega_plus, omega_minus):
            return P.collide_trt((h0, h1, h2, h3, h4, h5, h6, h7, h8), omega_plus, omega_minus)
    else:
        def collide(h0, h1, h2, h3, h4, h5, h6, h7, h8, omega_plus, omega_minus):
            return P.collide_bgk((h0, h1, h2, h3, h4, h5, h6, h7, h8), omega_plus)
    return collide


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


def _store_step(code, h: str, i: int) -> str:
    """The store of direction i's value h in a step kernel (``store_pop``, or stochastic with the seed ``rs``)."""
    return code.encode_step(h, i, "rs") if code is not None and code.stochastic else f"store_pop({h})"


def _collide_stores(code) -> str:
    """The stores of ``collide_store``: a loop of ``store_pop``, or with stochastic rounding (fp16c) the cell's seed
    from its pre-collision rest population hh[0] and one store per direction."""
    if not code.stochastic:
        return f"#pragma unroll\n  for (int i = 0; i < {lattice.Q}; ++i) B[i * N + cell] = store_pop(o[i]);"
    return "  " + code.seed("rs", "hh[0]", "cell") + "\n  " + "\n  ".join(
        f"B[{i} * N + cell] = {code.encode_step(f'o[{i}]', i, 'rs')};" for i in range(lattice.Q))


def _layer_c(layer: bool) -> tuple[str, str, str]:
    """(kernel parameters, collide_values / collide_store parameter, its argument at cell (x, y)) of the absorbing
    layer (``boundaries.layer``), empty strings without one."""
    if not layer:
        return "", "", ""
    return ("".join(f", const real_t {a}" for a in LAYER_ARGS), ", const real_t layer",
            ", layer_coefficient({x}, {y}, " + ", ".join(LAYER_ARGS) + ")")


def _bounds(block_x: int, max_registers: int | None) -> str:
    """The step kernels' launch qualifier: ``__launch_bounds__(block_x)``, or with a register cap
    ``__maxnreg__(max_registers)``. ptxas ignores ``--maxrregcount`` for a kernel with launch bounds (and the two
    qualifiers cannot be combined), so the cap is the kernel's own qualifier (CUDA 12.4 or newer). None or 0: no cap."""
    return f"__maxnreg__({int(max_registers)})" if max_registers else f"__launch_bounds__({block_x})"


def _step_kernel_c(layout, cpt: int, block_x: int, collision: str, mom_lines, mom_out, layer: bool = False,
                   code=None, max_registers: int | None = None) -> str:
    """The fused step kernel of one step layout: each thread updates ``cpt`` cells of one row, ``block_x``
    apart (every load instruction of a warp stays contiguous); all their loads are issued before the first
    collision, to keep enough bytes in flight for 16-bit storage. In place, the outlet cells also rewrite
    their velocity in ``own_u`` from the populations they just stored (the outlet rule's velocity at t + 1)."""
    Q = lattice.Q
    table = layout.own_velocity == "table"
    dst = "" if layout.in_place else f"store_t* __restrict__ {layout.dst}, "
    src_const = "" if layout.in_place else "const "
    extra = ("const long long* __restrict__ out_cells, real_t* __restrict__ own_u, const int n_out,\n    "
             if table else "")
    pull_extra = "out_cells, own_u, n_out, " if table else ""
    lay_params, _, lay_arg = _layer_c(layer)
    lay = lay_arg.format(x="x", y="y")
    stores = [layout.store(j) for j in range(Q)]
    if layout.in_place:
        store = (f"{{ const long long cell = row + x; const int xm = (x == 0) ? nx - 1 : x - 1; "
                 f"const int xp = (x == nx - 1) ? 0 : x + 1; real_t o[{Q}];\n"
                 f"        collide_values(h[k], o, omega_plus, omega_minus{lay});\n        "
                 + (code.seed("rs", "h[k][0]", "cell") + "\n        " if code is not None and code.stochastic else "")
                 + "\n        ".join(f"A[{stores[j]}] = {_store_step(code, f'o[{j}]', j)};" for j in range(Q)) + f"""
        if (code[k] & {BOUNDARY_BIT}) {{
          const int t = outlet_index(out_cells, n_out, cell);
          if (t >= 0) {{   // the outlet rule's velocity at t + 1: moments of the populations just stored
            {' '.join(f'const real_t h{j} = load_pop(A[{stores[j]}]);' for j in range(Q))}
            {' '.join(mom_lines)}
            own_u[t] = {mom_out[1]}; own_u[n_out + t] = {mom_out[2]};
          }}
        }}
      }}""")
    else:
        store = f"collide_store(h[k], {layout.dst}, N, row + x, omega_plus, omega_minus{lay});"
    return f"""
// One fused LBM step, {layout.name} (pull + boundaries + {collision.upper()} + store); see the module docstring.
// Bytes per cell per step: 18 * sizeof(store_t) + 1 (flag).
extern "C" __global__ void {_bounds(block_x, max_registers)}
{layout.kernel}({src_const}store_t* __restrict__ A, {dst}const unsigned char* __restrict__ flags,
    const long long* __restrict__ vel_cells, const real_t* __restrict__ vel_u, const int n_vel,
    {extra}const int nx, const int ny, const real_t omega_plus, const real_t omega_minus{lay_params}) {{
  const int y = blockIdx.y;
  const int x0 = blockIdx.x * ({block_x} * {cpt}) + threadIdx.x;
  const long long N = (long long)nx * ny;
  const long long row = (long long)y * nx;
  const long long rowm = (long long)((y == 0) ? ny - 1 : y - 1) * nx;
  const long long rowp = (long long)((y == ny - 1) ? 0 : y + 1) * nx;
  int code[{cpt}];
#pragma unroll
  for (int k = 0; k < {cpt}; ++k) {{
    const int x = x0 + k * {block_x};
    code[k] = (x < nx) ? (int)flags[row + x] : {WALL};
  }}
  real_t h[{cpt}][{Q}];
#pragma unroll
  for (int k = 0; k < {cpt}; ++k) {{
    if ((code[k] & 0x7f) == {FLUID})
      pull_cell_{layout.tag}(A, flags, vel_cells, vel_u, n_vel, {pull_extra}N, nx, x0 + k * {block_x}, row, rowm,
          rowp, code[k], h[k]);
  }}
#pragma unroll
  for (int k = 0; k < {cpt}; ++k) {{
    const int x = x0 + k * {block_x};
    if ((code[k] & 0x7f) == {FLUID}) {{
      {store}
    }}
  }}
}}
"""


def _moments_c(state, name: str, mom_lines, mom_out) -> str:
    """drho, ux, uy (compute dtype) of the stored state in ``state`` layout (``kernel_plan.EVEN`` / ``ODD``);
    non-fluid cells: 0."""
    Q = lattice.Q
    nl = "\n  "
    loads = " ".join(f"const real_t h{i} = load_pop(A[{state.own(i)}]);" for i in range(Q))
    return f"""
// drho, ux, uy of the {state.name} layout; non-fluid cells: 0, 0, 0
extern "C" __global__ void {name}(const store_t* __restrict__ A, const unsigned char* __restrict__ flags,
                                  real_t* __restrict__ out, const int nx, const int ny) {{
  const long long N = (long long)nx * ny;
  const long long cell = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (cell >= N) return;
  if ((flags[cell] & 0x7f) != {FLUID}) {{ out[cell] = 0; out[N + cell] = 0; out[2 * N + cell] = 0; return; }}
  const int y = (int)(cell / nx);
  const int x = (int)(cell - (long long)y * nx);
  const long long row = (long long)y * nx;
  const long long rowm = (long long)((y == 0) ? ny - 1 : y - 1) * nx;
  const long long rowp = (long long)((y == ny - 1) ? 0 : y + 1) * nx;
  const int xm = (x == 0) ? nx - 1 : x - 1;
  const int xp = (x == nx - 1) ? 0 : x + 1;
  {loads}
  {nl.join(mom_lines)}
  out[cell] = {mom_out[0]}; out[N + cell] = {mom_out[1]}; out[2 * N + cell] = {mom_out[2]};
}}
"""


_C_ARG = {"pop": "store_t* __restrict__", "pop_in": "const store_t* __restrict__",
          "index": "const long long* __restrict__", "real": "const real_t* __restrict__",
          "f64": "const double* __restrict__", "f64_out": "double* __restrict__"}


def list_kernel_c(kernel, P, code) -> str:
    """A link-list kernel of ``kernel_plan.ListKernel`` as CUDA C (one thread per list entry k)."""
    lines, _ = _emit_ops(kernel.body, P, code, None, {}, f"{kernel.name}_")
    args = ", ".join(f"{_C_ARG[kind]} {name}" for name, kind in kernel.args)
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
    real_t, suffix = code.real_t, code.suffix
    P = physics.physics_for(np.dtype(policy.compute))
    Q = lattice.Q
    hnames = {f"h{i}": f"h{i}" for i in range(Q)}
    rules = link_rules(characteristic)
    layouts = kernel_plan.step_layouts(in_place)

    col_lines, col_out = _trace(_collision_fn(P, collision, layer), real_t, suffix,
                                {**hnames, "omega_plus": "omega_plus", "omega_minus": "omega_minus",
                                 **({"layer": "layer"} if layer else {})}, "c_")
    _, lay_param, _ = _layer_c(layer)
    lay_pass = ", layer" if layer else ""
    mom_lines, mom_out = _trace(lambda **h: P.moments(tuple(h[f"h{i}"] for i in range(Q))), real_t, suffix,
                                hnames, "m_")
    own = {f"h{i}": f"o{i}" for i in range(Q)}
    own_lines, own_out = _trace(lambda **h: P.moments(tuple(h[f"h{i}"] for i in range(Q))), real_t, suffix,
                                own, "om_")
    nl = "\n  "
    parts = [f"""{_prelude_c(code)}
// home slot of a cell in a hash table of `size` slots (a power of two; gpu_common.cell_table)
__device__ __forceinline__ int table_home(const long long cell, const int size) {{
  return (int)((((unsigned long long)cell * {HASH_MULT:#x}ull) >> 32) & (unsigned long long)(size - 1));
}}

// u_w of a VELOCITY cell s (boundary links only): its slot in the hash table vel_cells (n_vel slots,
// linear probing); the values of the home slot load with its key, so one round trip when it is there
__device__ __forceinline__ void boundary_velocity(const long long* __restrict__ vel_cells,
    const real_t* __restrict__ vel_u, const int n_vel, const long long s, real_t* uwx, real_t* uwy) {{
  int k = table_home(s, n_vel);
  real_t ux = vel_u[k], uy = vel_u[n_vel + k];
  while (vel_cells[k] != s) {{ k = (k + 1) & (n_vel - 1); ux = vel_u[k]; uy = vel_u[n_vel + k]; }}
  *uwx = ux; *uwy = uy;
}}

// velocity of this cell at time t: moments of its own stored populations (outlet rule, two-buffer step)
__device__ void own_velocity(const store_t* __restrict__ A, const long long N, const long long cell,
                             real_t* ux, real_t* uy) {{
  {' '.join(f'const real_t o{i} = load_pop(A[{kernel_plan.EVEN.own(i)}]);' for i in range(Q))}
  {nl.join(own_lines)}
  *ux = {own_out[1]}; *uy = {own_out[2]};
}}

// the outlet cell's slot in the hash table out_cells (n_out slots; -1: not an outlet cell)
__device__ __forceinline__ int outlet_index(const long long* __restrict__ out_cells, const int n_out,
                                            const long long cell) {{
  int k = table_home(cell, n_out);
  long long key = out_cells[k];
  while (key != cell && key != -1) {{ k = (k + 1) & (n_out - 1); key = out_cells[k]; }}
  return key == cell ? k : -1;
}}

// velocity of an outlet cell at time t from the in-place table own_u (outlet rule, in-place steps)
__device__ __forceinline__ void outlet_velocity(const long long* __restrict__ out_cells, const real_t* own_u,
                                                const int n_out, const long long cell, real_t* ux, real_t* uy) {{
  const int k = outlet_index(out_cells, n_out, cell);
  *ux = own_u[k]; *uy = own_u[n_out + k];
}}
{layer_source(layer)}
// {collision.upper()} collision of one cell: post-collision populations out[0..8] from h[0..8].
__device__ __forceinline__ void collide_values(const real_t* hh, real_t* out, const real_t omega_plus,
                                               const real_t omega_minus{lay_param}) {{
  {' '.join(f'const real_t h{i} = hh[{i}];' for i in range(Q))}
  {nl.join(col_lines)}
  {nl.join(f'out[{i}] = {col_out[i]};' for i in range(Q))}
}}

// {collision.upper()} collision of h[0..8] and the store of the 9 post-collision populations of one cell.
__device__ __forceinline__ void collide_store(const real_t* hh, store_t* __restrict__ B, const long long N,
    const long long cell, const real_t omega_plus, const real_t omega_minus{lay_param}) {{
  real_t o[{Q}];
  collide_values(hh, o, omega_plus, omega_minus{lay_pass});
{_collide_stores(code)}
}}
"""]
    for layout in layouts:
        parts.append(_pull_cell_c(layout, P, code, rules))
        parts.append(_step_kernel_c(layout, 1 if layout.in_place else cpt, block_x, collision, mom_lines, mom_out,
                                    layer, code, max_registers))
    if not in_place and (code.store_t == "__half" or code.codec == "fp16c"):
        parts.append(_pair_kernel_c(block_x, code, layer, max_registers))
    for state in dict.fromkeys(layout.reads for layout in layouts):     # the state layouts a step starts from
        parts.append(_moments_c(state, state.moments_kernel, mom_lines, mom_out))
    parts.append(list_kernel_c(kernel_plan.FORCE_KERNEL, P, code))
    return "".join(parts)


#: the pair kernel's 32-bit words of two 16-bit populations (the even cell in the low half), per codec: the word
#: and element types, widening the high / the low half to float, and packing two floats (rounded to nearest)
_PAIR_WORDS = {
    None: {"word": "__half2", "elem": "__half", "high": "__high2float",
           "low": "__low2float", "pack": "__floats2half2_rn", "prelude": ""},
    "fp16c": {"word": "unsigned int", "elem": "unsigned short", "high": "fp16c_high",
              "low": "fp16c_low", "pack": "fp16c_pack", "prelude": """
__device__ __forceinline__ float fp16c_low(const unsigned int w) { return fp16c_widen((unsigned int)((int)(w << 16) >> 4)); }
__device__ __forceinline__ float fp16c_high(const unsigned int w) { return fp16c_widen((unsigned int)((int)w >> 4)); }
__device__ __forceinline__ unsigned int fp16c_pack(const float a, const float b) {
  return (unsigned int)fp16c_encode(a) | ((unsigned int)fp16c_encode(b) << 16);
}
// the low code as fp16c_encode_sr; the high one shifted into place directly (bits 30..16: its magnitude, 31: sign)
__device__ __forceinline__ unsigned int fp16c_pack_sr(const float a, const float b, const unsigned int ra,
                                                      const unsigned int rb) {
  return (unsigned int)fp16c_encode_sr(a, ra)
         | ((fp16c_scaled_sr(b, rb) << 4) & 0x7FFF0000u) | (__float_as_uint(b) & 0x80000000u);
}"""},
}


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
    h = code.unscale     # the halves are widened to float by __high2float / __low2float (fp16c_high / fp16c_low)
    lay_params, _, lay_arg = _layer_c(layer)
    w = _PAIR_WORDS[code.codec]
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
    nl = "\n    "
    # __floats2half2_rn rounds to nearest as store_pop does; the pair only gets the policy's scale
    if code.stochastic:     # fp16c: stochastic rounding with the two cells' seeds (their pre-collision rest populations)
        from hpcsolve.core import fp16c

        stores = "\n      ".join(
            [code.seed("sa", "ha[0]", "row + x"), code.seed("sb", "hb[0]", "row + x + 1")]
            + [f"B2[{i} * NP + prow + px] = fp16c_pack_sr({code.scale(f'oa[{i}]')}, {code.scale(f'ob[{i}]')}, {a:#x}u * sa + {c:#x}u, {a:#x}u * sb + {c:#x}u);"
               for i, (a, c) in enumerate(fp16c.STREAM)])
    else:
        stores = "\n      ".join(f"B2[{i} * NP + prow + px] = {w['pack']}({code.scale(f'oa[{i}]')}, "
                               f"{code.scale(f'ob[{i}]')});" for i in range(Q))
    return f"""{w['prelude']}
// 16-bit storage, nx even: two adjacent cells per thread with {w['word']} loads and stores (see
// kernels_cupy._pair_kernel_c). Bytes per cell per step as lbm_step: 18 * 2 + 1 = 37.
extern "C" __global__ void {_bounds(block_x, max_registers)}
lbm_step_pair(const {w['elem']}* __restrict__ A, {w['elem']}* __restrict__ B, const unsigned char* __restrict__ flags,
              const long long* __restrict__ vel_cells, const real_t* __restrict__ vel_u, const int n_vel,
              const int nx, const int ny, const real_t omega_plus, const real_t omega_minus{lay_params}) {{
  const int npairs = nx >> 1;
  const int p_raw = blockIdx.x * {block_x} + threadIdx.x;
  const bool active = p_raw < npairs;
  const int px = active ? p_raw : npairs - 1;        // inactive lanes still join the shuffles
  const int lane = threadIdx.x & 31;
  const bool last = (lane == 31) || (px == npairs - 1);
  const int y = blockIdx.y;
  const int x = 2 * px;
  const long long N = (long long)nx * ny;
  const long long NP = N >> 1;
  const long long row = (long long)y * nx;
  const long long rowm = (long long)((y == 0) ? ny - 1 : y - 1) * nx;
  const long long rowp = (long long)((y == ny - 1) ? 0 : y + 1) * nx;
  const long long prow = row >> 1, prowm = rowm >> 1, prowp = rowp >> 1;
  const int pm = (px == 0) ? npairs - 1 : px - 1;
  const int pp = (px == npairs - 1) ? 0 : px + 1;
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
