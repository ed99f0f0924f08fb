"""The Numba emitter of the LBM kernel plan (``kernel_plan.py``): Python source that ``kernels_numba`` compiles
with ``numba.cuda.jit``.

The physics is not in the text: the kernels call ``physics.physics_for(compute_dtype, jit=...)``, the very
functions the NumPy reference evaluates, compiled as device functions and bound by name in the kernels'
namespace (``kernels_numba.compiled_kernels``). Positions come from the plan's layouts, unrolled over the 9
directions with the constants of ``lattice.py``; the boundary rules' pieces from ``boundaries/``; population
loads and stores from ``population_code.numba_code`` (through ``load_at`` / ``store_at``, no negative-index
wraparound).

The step and moments kernels are described once in ``step_plan`` and printed here by
``print_numba.PythonPrinter``; the pull functions, the helpers and the pair kernel are still Python templates of
this module (twins in ``emit_cuda``).

- :func:`kernel_source`: the helpers, per step layout its pull and step kernel, the 16-bit pair kernel, the
  moments of each state layout and the ``lbm_force`` list kernel;
- :func:`bouzidi_source`: the interpolated bounce-back pre-pass (``bouzidi.GATHER`` / ``SCATTER``).

Its twin for CUDA C is ``emit_cuda``; neither imports the other.
"""

from __future__ import annotations

import functools

from hpcsolve.lbm.boundaries import bouzidi
from hpcsolve.lbm.kernels import kernel_plan
from hpcsolve.lbm import lattice
from hpcsolve.lbm.boundaries import link_rules
from hpcsolve.lbm.boundaries.layer import ARGS as LAYER_ARGS, PYTHON_SOURCE as LAYER_PYTHON
from hpcsolve.lbm.flags import FLUID
from hpcsolve.lbm.steppers.gpu_common import BOUNDARY_BIT
from hpcsolve.lbm.kernels import helper_plan, step_plan
from hpcsolve.lbm.kernels.population_code import numba_code
from hpcsolve.lbm.kernels.print_numba import PythonPrinter, collision_call


def _emit_ops_python(ops, layout, code) -> list[str]:
    """Python statements of a kernel piece (``kernel_plan.Op``s). Every name passes through as it is: the
    piece's names, kernel locals, the link constants ``w_i`` / ``cx_i`` / ``cy_i`` (arguments of the generic
    ``pull_boundary_*``) and ``ZERO`` are Python names of the kernel's namespace; a ``physics`` op calls the
    device function of that name (``physics.physics_for(..., jit=...)``, bound by ``kernels_numba.compiled_kernels``)."""
    out = []
    for op in ops:
        if op.kind == "lookup":
            out.append(f"{op.out[0]}, {op.out[1]} = boundary_velocity(vel_cells, vel_u, n_vel, {op.args[0]})")
        elif op.kind == "own_velocity":
            ux, uy = op.out
            if layout.own_velocity == "stored":
                out.append(f"{ux}, {uy} = own_velocity(A, N, cell)")
            else:
                out += ["t = outlet_index(out_cells, n_out, cell)", f"{ux} = own_u[t]", f"{uy} = own_u[n_out + t]"]
        elif op.kind == "physics":
            out.append(f"{', '.join(op.out)} = {op.fn}({', '.join(op.args)})")
        elif op.kind == "load":
            out.append(f"{op.out[0]} = load_pop({op.args[0]}, {op.args[1]})")
        elif op.kind == "widen":
            out.append(f"{op.out[0]} = float64({op.args[0]})")
        elif op.kind == "expr":
            out.append(f"{op.out[0]} = " + (op.args[0] if op.fn == "double" else f"CT({op.args[0]})"))
        elif op.kind == "store":
            array, index, value = op.args
            out.append(f"{array}[{index}] = {code.encode(value)}")
        elif op.kind == "copy":
            dst, di, src, si = op.args
            out.append(f"{dst}[{di}] = {src}[{si}]")
        elif op.kind == "atomic_add":
            out.append(f"cuda.atomic.add({op.args[0]}, {op.args[1]}, {op.args[2]})")
        else:
            raise ValueError(f"unknown kernel op {op.kind!r}")
    return out


def list_kernel_python(kernel, code) -> str:
    """A link-list kernel of ``kernel_plan.ListKernel`` as Python for ``numba.cuda.jit`` (one thread per entry
    k); ``load_pop`` is the caller's."""
    body = "\n".join("        " + line for line in _emit_ops_python(kernel.body, None, code))
    args = ", ".join(name for name, _ in kernel.args)
    return f"""

def {kernel.name}({args}, n):
    # {kernel.doc}
    k = cuda.grid(1)
    if k < n:
{body}
"""


def _tables(layout) -> str:
    """The in-place outlet table arguments of a step layout that keeps the own velocity in a table."""
    return "out_cells, own_u, n_out, " if layout.own_velocity == "table" else ""


def _pull_python(layout, rules, code) -> str:
    """``pull_boundary_<layout>`` (one link of a boundary cell: the fluid pull or the rule of the source's flag,
    generic in the direction) and ``pull_cell_<layout>`` (the nine populations arriving at a fluid cell), the
    positions from the step layout (``kernel_plan.StepLayout``), the rules' pieces from ``boundaries``."""
    Q, OPP = lattice.Q, lattice.OPPOSITE
    tag, tables = layout.tag, _tables(layout)
    L = [f"def pull_boundary_{tag}(A, flags, vel_cells, vel_u, n_vel, {tables}N, cell, s, i, opp, w_i, cx_i, cy_i):",
         "    fs = load_at(flags, s) & 0x7f",
         f"    if fs == {FLUID}:",
         f"        return load_pop(A, {layout.pull('i')})",
         f"    hop = load_pop(A, {layout.hop('i')})"]
    for r, rule in enumerate(rules):
        last = r == len(rules) - 1
        ind = "    " if last else "        "
        if not last:
            L.append(f"    if fs == {rule.flag}:   # {rule.name}")
        else:
            L.append(f"    # {rule.name}")
        L += [ind + line for line in _emit_ops_python(rule.piece, layout, code)] + [ind + "return h"]
    interior = ", ".join(code.decode(f"load_at(A, {layout.interior(i)})") for i in range(Q))
    L += ["", "",
          f"def pull_cell_{tag}(A, flags, vel_cells, vel_u, n_vel, {tables}N, nx, x, row, rowm, rowp, code):",
          "    cell = row + x",
          "    xm = nx - 1 if x == 0 else x - 1",
          "    xp = 0 if x == nx - 1 else x + 1",
          f"    if (code & {BOUNDARY_BIT}) == 0:",
          f"        return ({interior})",
          "    return (" + code.decode("load_at(A, cell)") + ","]
    for i in range(1, Q):
        L.append(f"            pull_boundary_{tag}(A, flags, vel_cells, vel_u, n_vel, {tables}N, cell, "
                 f"{kernel_plan.SOURCE[i]}, {i}, {OPP[i]}, W{i}, CX{i}, CY{i}),")
    L.append("            )")
    return "\n".join(L) + "\n"


def _step_kernel_python(layout, collision: str, code, cpt: int, block_x: int, layer: bool = False) -> str:
    """The fused step kernel of one step layout (``step_plan.step_kernel``), the twin of ``emit_cuda``'s."""
    kernel = step_plan.step_kernel(layout, cpt, block_x, collision, layer)
    return PythonPrinter(code, collision, layer).kernel_text(kernel)


def _moments_python(state, code) -> str:
    """drho, ux, uy of the stored state in ``state`` layout (``step_plan.moments_kernel``)."""
    return PythonPrinter(code).kernel_text(step_plan.moments_kernel(state))


def _pair_kernel_python(collision: str, code, block_x: int, exchange: str, layer: bool = False) -> str:
    """Python source of ``lbm_step_pair`` (16-bit storage, nx even), the algorithm of
    ``kernels_cupy._pair_kernel_c``: two adjacent cells (x, x + 1) per thread, one aligned 4-byte
    word (an int32 view of the float16 buffer: g[x], g[x + 1]) loaded per population, one packed
    word stored. The half pulled from x - 1 or x + 2 (c_x = +-1) is the neighbouring thread's word,
    exchanged by warp shuffles (``exchange="shfl"``, GPU only) or through shared memory and one
    barrier (``"smem"``, also under the simulator, which has no shuffles); the thread at the edge of
    the warp / block, and the pair at the periodic wrap (pair index modulo nx / 2), loads it itself.
    ``half_lo`` / ``half_hi`` widen the low / high float16 of a word to float32 and ``pack_halves``
    rounds two float32 to float16 (nearest even) and packs them (LLVM bitcast/fpext/fptrunc
    intrinsics on the GPU, NumPy views under the simulator)."""
    Q, pulls = lattice.Q, kernel_plan.PAIR_PULLS
    h = code.unscale     # half_lo / half_hi widen to float32 already
    shifted = [i for i in range(Q) if pulls[i].neighbour]     # c_x = +-1: a half of the neighbouring word
    L = []
    a = L.append
    lay_params = "".join(f", {a}" for a in LAYER_ARGS) if layer else ""
    a(f"def lbm_step_pair(A, B, A32, B32, flags, vel_cells, vel_u, n_vel, nx, ny, omega_plus, omega_minus{lay_params}):")
    a("    npairs = nx >> 1")
    a("    tid = cuda.threadIdx.x")
    a(f"    p_raw = cuda.blockIdx.x * {block_x} + tid")
    a("    active = p_raw < npairs")
    a("    px = p_raw if active else npairs - 1")
    if exchange == "shfl":
        a("    edge_lo = (tid & 31) == 0")
        a("    edge_hi = (tid & 31) == 31 or px == npairs - 1")
    else:
        a(f"    xch = cuda.shared.array({len(shifted) * block_x}, int32)")
        a("    edge_lo = tid == 0")
        a(f"    edge_hi = tid == {block_x - 1} or px == npairs - 1")
    L += PythonPrinter(code).block(helper_plan.pair_locals(), 1)     # y, x, N, the (pair) rows, pm / pp
    base = {i: f"{i} * NP + {pulls[i].row}" for i in range(Q)}
    for i in range(Q):
        a(f"    u{i} = load_at(A32, {base[i]} + px)")
    if exchange == "smem":
        for j, i in enumerate(shifted):
            a(f"    store_at(xch, {j * block_x} + tid, u{i})")
        a("    cuda.syncthreads()")
    for j, i in enumerate(shifted):
        # every lane executes the shuffle (outside the conditional: all 32 lanes must take part)
        d = pulls[i].neighbour          # -1: the previous thread's word, +1: the next thread's
        if exchange == "shfl":
            a(f"    s{i} = cuda.shfl_{'up' if d < 0 else 'down'}_sync(-1, u{i}, 1)")
        nb = f"s{i}" if exchange == "shfl" else f"load_at(xch, {j * block_x + d} + tid)"
        a(f"    n{i} = load_at(A32, {base[i]} + {'pm' if d < 0 else 'pp'}) if {'edge_lo' if d < 0 else 'edge_hi'} "
          f"else {nb}")
    a("    if not active:")
    a("        return")
    a("    c0 = load_at(flags, row + x)")
    a("    c1 = load_at(flags, row + x + 1)")
    a(f"    if c0 == {FLUID} and c1 == {FLUID}:")
    def half(i, where):                 # (word, half) of kernel_plan.PairPull as an expression
        word, hh = where
        return h(f"half_{hh}({'u' if word == 'own' else 'n'}{i})")

    ha = [half(i, pulls[i].a) for i in range(Q)]
    hb = [half(i, pulls[i].b) for i in range(Q)]
    col = collision_call(collision, layer)
    a(f"        pa = {col.format(h='(' + ', '.join(ha) + ')', x='x', y='y')}")
    a(f"        pb = {col.format(h='(' + ', '.join(hb) + ')', x='x + 1', y='y')}")
    if code.stochastic:     # fp16c: stochastic rounding with the two cells' seeds
        a("        " + code.seed("sa", ha[0], "row + x"))
        a("        " + code.seed("sb", hb[0], "row + x + 1"))
        for i in range(Q):
            a(f"        store_at(B32, {i} * NP + prow + px, {code.pack_step(f'pa[{i}]', f'pb[{i}]', i, 'sa', 'sb')})")
    else:
        for i in range(Q):
            a(f"        store_at(B32, {i} * NP + prow + px, "
              f"pack_halves({code.scale(f'pa[{i}]')}, {code.scale(f'pb[{i}]')}))")
    a("    else:")
    for k, c in ((0, "c0"), (1, "c1")):
        a(f"        if ({c} & 0x7f) == {FLUID}:")
        a(f"            h = pull_cell_step(A, flags, vel_cells, vel_u, n_vel, N, nx, x + {k}, row, rowm, rowp, {c})")
        a(f"            p = {col.format(h='h', x=f'x + {k}', y='y')}")
        if code.stochastic:
            a("            " + code.seed("rs", "h[0]", f"row + x + {k}"))
        for i in range(Q):
            a(f"            store_at(B, {i} * N + row + x + {k}, {code.encode_step(f'p[{i}]', i, 'rs')})")
    return "\n".join(L) + "\n"


def _helpers_python(code) -> str:
    """The device helpers of the step kernels (loads, the outlet rule's own velocity, the hash-table lookups)
    and the small kernels around them (velocity scaling, fill, perturbation, the finite check)."""
    printer = PythonPrinter(code)
    helpers = "\n\n".join(printer.function_text(f) for f in (
        step_plan.own_velocity(), helper_plan.table_home(), helper_plan.boundary_velocity(),
        helper_plan.outlet_index()))
    return f'''
def load_pop(A, k):
    return {code.decode("load_at(A, k)")}


{helpers}

def lbm_scale_velocity(full, s, out, n):
    k = cuda.grid(1)
    if k < n:
        out[k] = CT(full[k] * s)


def lbm_fill_zero(A, n):
    k = cuda.grid(1)
    if k < n:
        A[k] = 0


def lbm_perturb(A, flags, weights, N, amplitude, seed):
    # A[i, x] += amplitude * w_i * r, r in [-1, 1) from an integer hash of (i * N + x, seed)
    k = cuda.grid(1)
    if k >= 9 * N:
        return
    i = k // N
    cell = k - i * N
    if (flags[cell] & 0x7f) != {FLUID}:
        return
    h = (k * 2654435761 + seed * 40503 + 12345) & 0xFFFFFFFF
    h = ((h >> 16) ^ h) * 73244475 & 0xFFFFFFFF
    h = ((h >> 16) ^ h) * 73244475 & 0xFFFFFFFF
    h = (h >> 16) ^ h
    r = CT(h * (2.0 / 4294967296.0) - 1.0)
    A[k] = {code.encode("(load_pop(A, k) + amplitude * weights[i] * r)")}


def lbm_nonfinite(A, n, out):
    k = cuda.grid(1)
    if k < n:
        v = float64({"load_pop(A, k)" if code.integer_codes else "A[k]"})
        if not (v - v == 0.0):
            out[0] = 1
'''


def kernel_source(policy, collision: str, cpt: int = 1, block_x: int = 256, pairs: bool = False,
                  exchange: str = "smem", in_place: bool = False, characteristic: bool = False,
                  layer: bool = False) -> str:
    """Python source of the kernels ``kernels_numba.compiled_kernels`` compiles, emitted from the plan
    (``kernel_plan.step_layouts``, ``boundaries.link_rules``): the helpers, per step layout its pull and step
    kernel (two-buffer ``lbm_step``, or in place the AA pair ``lbm_step_aa_even`` / ``_odd``), the 16-bit pair
    kernel where ``pairs``, the moments of each state layout and the force list kernel; loads and stores from
    ``population_code.numba_code``; ``characteristic``: the outlet rule looks up the reference outflow
    (``boundaries.outlet.characteristic_outlet``); ``layer``: the collision adds the absorbing layer's bulk
    relaxation (``boundaries.layer``; the step kernels take its four arguments after omega_minus)."""
    code = numba_code(policy)
    rules = link_rules(characteristic)
    parts = [_helpers_python(code)] + ([LAYER_PYTHON] if layer else [])
    for layout in kernel_plan.step_layouts(in_place):
        parts.append(_pull_python(layout, rules, code))
        parts.append(_step_kernel_python(layout, collision, code, 1 if layout.in_place else cpt, block_x, layer))
    if pairs and not in_place:
        parts.append(_pair_kernel_python(collision, code, block_x, exchange, layer))
    for state in dict.fromkeys(layout.reads for layout in kernel_plan.step_layouts(in_place)):
        parts.append(_moments_python(state, code))
    parts.append(list_kernel_python(kernel_plan.FORCE_KERNEL, code))
    return "\n\n".join(parts)


@functools.lru_cache(maxsize=None)
def bouzidi_source(policy) -> str:
    """Python source of the interpolated bounce-back pre-pass for one policy: the list kernels
    ``bouzidi.GATHER`` / ``SCATTER`` (the twin of ``kernels_cupy.bouzidi_source``)."""
    code = numba_code(policy)
    return (f"def load_pop(A, k):\n    return {code.decode('A[k]')}\n"
            + "".join(list_kernel_python(k, code) for k in (bouzidi.GATHER, bouzidi.SCATTER)))
