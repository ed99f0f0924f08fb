"""The Numba emitter of the LBM kernel plan (``kernel_plan.py``): Python source that ``kernels_numba`` compiles
with ``numba.cuda.jit``.

The physics is not in the text: the kernels call ``physics.physics_for(compute_dtype, jit=...)``, the very
functions the NumPy reference evaluates, compiled as device functions and bound by name in the kernels'
namespace (``kernels_numba.compiled_kernels``). Positions come from the plan's layouts, unrolled over the 9
directions with the constants of ``lattice.py``; the boundary rules' pieces from ``boundaries/``; population
loads and stores from ``population_code.numba_code`` (through ``load_at`` / ``store_at``, no negative-index
wraparound).

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
from hpcsolve.lbm.flags import FLUID, WALL
from hpcsolve.lbm.steppers.gpu_common import BOUNDARY_BIT
from hpcsolve.lbm.kernels.population_code import numba_code


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


def _collision_call(collision: str, layer: bool) -> str:
    """The collision call of the step kernels, ``{h}`` the populations; with the absorbing layer (``boundaries.layer``)
    also ``{x}``, ``{y}``: the cell's lattice indices."""
    if layer:
        lay = "layer_coefficient({x}, {y}, " + ", ".join(LAYER_ARGS) + ")"
        return ("collide_trt_layer({h}, omega_plus, omega_minus, " + lay + ")" if collision == "trt"
                else "collide_bgk_layer({h}, omega_plus, " + lay + ")")
    return "collide_trt({h}, omega_plus, omega_minus)" if collision == "trt" else "collide_bgk({h}, omega_plus)"


def _step_kernel_python(layout, collision: str, code, cpt: int, block_x: int, layer: bool = False) -> str:
    """The fused step kernel of one step layout (``kernel_plan.StepLayout``): each thread updates ``cpt``
    cells of one row, ``block_x`` apart (all their loads before the first collision); in place, the
    outlet cells rewrite their velocity in ``own_u`` from the populations they just stored (the outlet
    rule's velocity at t + 1). The twin of ``kernels_cupy._step_kernel_c``."""
    Q = lattice.Q
    tag, tables = layout.tag, _tables(layout)
    dst = "" if layout.in_place else f"{layout.dst}, "
    col = _collision_call(collision, layer)
    lay_params = "".join(f", {a}" for a in LAYER_ARGS) if layer else ""
    L = [f"def {layout.kernel}(A, {dst}flags, vel_cells, vel_u, n_vel, {tables}nx, ny, omega_plus, omega_minus"
         f"{lay_params}):",
         "    y = cuda.blockIdx.y",
         f"    x0 = cuda.blockIdx.x * {block_x * cpt} + cuda.threadIdx.x",
         "    N = nx * ny",
         "    row = y * nx",
         "    rowm = (ny - 1 if y == 0 else y - 1) * nx",
         "    rowp = (0 if y == ny - 1 else y + 1) * nx"]
    for k in range(cpt):
        L += [f"    x{k} = x0 + {k * block_x}",
              f"    code{k} = load_at(flags, row + x{k}) if x{k} < nx else {WALL}"]
    for k in range(cpt):
        L += [f"    h{k} = ZERO9",
              f"    if (code{k} & 0x7f) == {FLUID}:",
              f"        h{k} = pull_cell_{tag}(A, flags, vel_cells, vel_u, n_vel, {tables}N, nx, x{k}, row, rowm, "
              f"rowp, code{k})"]
    stores = [layout.store(j) for j in range(Q)]
    for k in range(cpt):
        L += [f"    if (code{k} & 0x7f) == {FLUID}:",
              f"        p = {col.format(h=f'h{k}', x=f'x{k}', y='y')}",
              f"        x = x{k}",
              "        cell = row + x"]
        if layout.writes.shifted:
            L += ["        xm = nx - 1 if x == 0 else x - 1", "        xp = 0 if x == nx - 1 else x + 1"]
        if code.stochastic:     # the cell's seed from its pre-collision rest population (fp16c)
            L.append("        " + code.seed("rs", f"h{k}[0]", "cell"))
        L += [f"        store_at({layout.dst}, {stores[j]}, {code.encode_step(f'p[{j}]', j, 'rs')})" for j in range(Q)]
        if layout.own_velocity == "table":
            stored = ", ".join(code.decode(f"load_at(A, {stores[j]})") for j in range(Q))
            L += [f"        if (code{k} & {BOUNDARY_BIT}) != 0:",
                  "            t = outlet_index(out_cells, n_out, cell)",
                  "            if t >= 0:   # the outlet rule's velocity at t + 1: moments of the populations just stored",
                  f"                drho, ux, uy = moments(({stored}))",
                  "                own_u[t] = ux",
                  "                own_u[n_out + t] = uy"]
    return "\n".join(L) + "\n"


def _moments_python(state, name: str, code) -> str:
    """drho, ux, uy (compute dtype) of the stored state in ``state`` layout (``kernel_plan.EVEN`` / ``ODD``);
    non-fluid cells: 0. The twin of ``kernels_cupy._moments_c``."""
    Q = lattice.Q
    L = [f"def {name}(A, flags, out, nx, ny):",
         "    cell = cuda.grid(1)",
         "    N = nx * ny",
         "    if cell >= N:",
         "        return",
         f"    if (flags[cell] & 0x7f) != {FLUID}:",
         "        out[cell] = ZERO",
         "        out[N + cell] = ZERO",
         "        out[2 * N + cell] = ZERO",
         "        return"]
    if state.shifted:
        L += ["    y = cell // nx", "    x = cell - y * nx", "    row = y * nx",
              "    rowm = (ny - 1 if y == 0 else y - 1) * nx", "    rowp = (0 if y == ny - 1 else y + 1) * nx",
              "    xm = nx - 1 if x == 0 else x - 1", "    xp = 0 if x == nx - 1 else x + 1"]
    L += ["    drho, ux, uy = moments((" + ", ".join(code.decode(f"load_at(A, {state.own(i)})") for i in range(Q)) + "))",
          "    out[cell] = drho", "    out[N + cell] = ux", "    out[2 * N + cell] = uy"]
    return "\n".join(L) + "\n"


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
    a("    y = cuda.blockIdx.y")
    a("    x = 2 * px")
    a("    N = nx * ny")
    a("    NP = N >> 1")
    a("    row = y * nx")
    a("    rowm = (ny - 1 if y == 0 else y - 1) * nx")
    a("    rowp = (0 if y == ny - 1 else y + 1) * nx")
    a("    prow = row >> 1")
    a("    prowm = rowm >> 1")
    a("    prowp = rowp >> 1")
    a("    pm = npairs - 1 if px == 0 else px - 1")
    a("    pp = 0 if px == npairs - 1 else px + 1")
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
    col = _collision_call(collision, layer)
    a(f"        pa = {col.format(h='(' + ', '.join(ha) + ')', x='x', y='y')}")
    a(f"        pb = {col.format(h='(' + ', '.join(hb) + ')', x='x + 1', y='y')}")
    if code.stochastic:     # fp16c: stochastic rounding with the two cells' seeds
        a("        " + code.seed("sa", ha[0], "row + x"))
        a("        " + code.seed("sb", hb[0], "row + x + 1"))
        for i in range(Q):
            a(f"        store_at(B32, {i} * NP + prow + px, FP16C_PACK_SR{i}({code.scale(f'pa[{i}]')}, {code.scale(f'pb[{i}]')}, sa, sb))")
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
    own = ", ".join(code.decode(f"load_at(A, {kernel_plan.EVEN.own(i)})") for i in range(lattice.Q))
    return f'''
def load_pop(A, k):
    return {code.decode("load_at(A, k)")}


def own_velocity(A, N, cell):
    # velocity of this cell at time t: moments of its own stored populations (outlet rule, two-buffer step)
    drho, ux, uy = moments(({own}))
    return ux, uy


def table_home(cell, size):
    # home slot of a cell in a hash table of size slots (a power of two; gpu_common.cell_table)
    return int64(((uint64(cell) * HASH_MULT) >> SHIFT32) & uint64(size - 1))


def boundary_velocity(vel_cells, vel_u, n_vel, s):
    # u_w of the VELOCITY cell s: its slot in the hash table vel_cells (linear probing); the home
    # slot's values load with its key
    k = table_home(s, n_vel)
    ux = vel_u[k]
    uy = vel_u[n_vel + k]
    while vel_cells[k] != s:
        k = (k + 1) & (n_vel - 1)
        ux = vel_u[k]
        uy = vel_u[n_vel + k]
    return ux, uy


def outlet_index(out_cells, n_out, cell):
    # the outlet cell's slot in the hash table out_cells (-1: not an outlet cell)
    k = table_home(cell, n_out)
    key = out_cells[k]
    while key != cell and key != -1:
        k = (k + 1) & (n_out - 1)
        key = out_cells[k]
    return k if key == cell else -1


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
        v = float64({"load_pop(A, k)" if code.codec else "A[k]"})
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
        parts.append(_moments_python(state, state.moments_kernel, code))
    parts.append(list_kernel_python(kernel_plan.FORCE_KERNEL, code))
    return "\n\n".join(parts)


@functools.lru_cache(maxsize=None)
def bouzidi_source(policy) -> str:
    """Python source of the interpolated bounce-back pre-pass for one policy: the list kernels
    ``bouzidi.GATHER`` / ``SCATTER`` (the twin of ``kernels_cupy.bouzidi_source``)."""
    code = numba_code(policy)
    return (f"def load_pop(A, k):\n    return {code.decode('A[k]')}\n"
            + "".join(list_kernel_python(k, code) for k in (bouzidi.GATHER, bouzidi.SCATTER)))
