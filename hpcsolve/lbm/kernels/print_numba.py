"""Python syntax (for ``numba.cuda.jit``) of the kernel plan's statements (``kernel_plan``, walked by
``printer.Printer``): the printer ``emit_numba`` writes the step and moments kernels with. Physics calls are calls
of the compiled ``physics`` functions bound in the kernels' namespace; device arrays are read and written through
``load_at`` / ``store_at`` (no negative-index wraparound); population loads and stores are the policy's
(``population_code.numba_code``). An unrolled loop is written out: ``name[k]`` of a per-cell array becomes the
local ``name_<k>``."""

from __future__ import annotations

import re

from hpcsolve.lbm.boundaries.layer import ARGS as LAYER_ARGS
from hpcsolve.lbm.kernels.kernel_plan import PAIR_PULLS
from hpcsolve.lbm.kernels.printer import Printer

_NAMED = {"zero": "ZERO", "false": "False", "zero9": "ZERO9", "block_x": "cuda.blockIdx.x", "block_y": "cuda.blockIdx.y",
          "thread_x": "cuda.threadIdx.x", "thread": "cuda.grid(1)", "hash_mult": "HASH_MULT", "shift32": "SHIFT32"}

#: Numba's conversion functions of the plan's integer types (``kernel_plan.Conv``)
_CONV = {"int": "int64", "u64": "uint64"}


def collision_call(collision: str, layer: bool) -> str:
    """The collision call of the step kernels, ``{h}`` the populations; with the absorbing layer (``boundaries.layer``)
    also ``{x}``, ``{y}``: the cell's lattice indices."""
    if layer:
        lay = "layer_coefficient({x}, {y}, " + ", ".join(LAYER_ARGS) + ")"
        return ("collide_trt_layer({h}, omega_plus, omega_minus, " + lay + ")" if collision == "trt"
                else "collide_bgk_layer({h}, omega_plus, " + lay + ")")
    return "collide_trt({h}, omega_plus, omega_minus)" if collision == "trt" else "collide_bgk({h}, omega_plus)"


def emit_ops(ops, own: str | None, code, names: dict | None = None) -> list[str]:
    """Python statements of a kernel piece (``kernel_plan.Op``s). Every name passes through as it is (the
    piece's names, kernel locals, ``ZERO``: Python names of the kernel's namespace) except those ``names`` maps (the
    link constants ``w_i`` / ``cx_i`` / ``cy_i`` to direction i's ``W<i>`` / ``CX<i>`` / ``CY<i>``); a ``physics`` op calls the
    device function of that name (``physics.physics_for(..., jit=...)``, bound by ``kernels_numba.compiled_kernels``).
    ``own``: where the cell's velocity at time t is (``StepLayout.own_velocity``), fetched once per cell (flag
    ``have_own``); list kernels: None."""
    out = []
    for op in ops:
        if op.kind == "lookup":
            out.append(f"{op.out[0]}, {op.out[1]} = boundary_velocity(vel_cells, vel_u, n_vel, {op.args[0]})")
        elif op.kind == "own_velocity":
            ux, uy = op.out
            fetch = ([f"{ux}, {uy} = own_velocity(A, N, cell)"] if own == "stored" else
                     ["t = outlet_index(out_cells, n_out, cell)", f"{ux} = own_u[t]", f"{uy} = own_u[n_out + t]"])
            out += ["if not have_own:", *("    " + line for line in fetch), "    have_own = True"]
        elif op.kind == "physics":
            out.append(f"{', '.join(op.out)} = {op.fn}({', '.join((names or {}).get(a, a) for a in op.args)})")
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


class PythonPrinter(Printer):
    """Python of the plan's statements; ``code``: the population code, ``collision`` / ``layer``: the collision call,
    ``exchange``: how the pair kernel passes words between threads (``"shfl"``: warp shuffles, GPU only; ``"smem"``:
    shared memory and one barrier, also under the simulator, which has no shuffles)."""

    indent = "    "
    NAMED = _NAMED
    AND, IDIV, NOT = "and", "//", "not "

    def __init__(self, code, collision: str = "bgk", layer: bool = False, exchange: str = "smem"):
        self.code, self.exchange = code, exchange
        self.col = collision_call(collision, layer)
        self.unroll: dict[str, int] = {}
        self.out_array = ""           # the array a device function fills: name[j] is the local name_j

    def name(self, text):
        for var, k in self.unroll.items():
            text = re.sub(rf"\b(\w+)\[{var}\]", rf"\g<1>_{k}", text)
            text = re.sub(rf"\b{var}\b", str(k), text)
        if self.out_array:
            text = re.sub(rf"\b{self.out_array}\[(\d+)\]", rf"{self.out_array}_\1", text)
        return text

    def sel(self, e, nested):
        text = f"{self.expr(e.a)} if {self.expr(e.cond)} else {self.expr(e.b)}"
        return self.group(text, nested)

    def cast(self, e, nested):       # the value, grouped as the C cast groups it
        return self.expr(e.value, True)

    def conv(self, e, nested):
        return f"{_CONV[e.type]}({self.expr(e.value)})"

    def pop(self, e, nested):
        return self.code.decode(f"load_at({e.array}, {self.expr(e.pos)})")

    def at(self, e, nested):
        return f"load_at({e.array}, {self.expr(e.index)})"

    def let(self, s, depth):
        return [f"{self.pad(depth)}{s.name} = {self.expr(s.value)}"]

    def var(self, s, depth):
        return self.let(s, depth)

    def while_(self, s, depth):
        return [f"{self.pad(depth)}while {self.expr(s.cond)}:"] + self.block(s.body, depth + 1)

    def decl(self, s, depth):       # a per-cell array that needs a value on every path: one local per cell
        if s.init is None:
            return []
        return [f"{self.pad(depth)}{s.name}_{k} = {self.expr(s.init)}" for k in range(s.shape[0])]

    def set_(self, s, depth):
        return [f"{self.pad(depth)}{self.name(s.target)} = {self.expr(s.value)}"]

    def if_(self, s, depth):
        note = f"   # {s.note}" if s.note else ""
        out = [f"{self.pad(depth)}if {self.expr(s.cond)}:{note}"] + self.block(s.then, depth + 1)
        if s.orelse:
            out += [f"{self.pad(depth)}else:"] + self.block(s.orelse, depth + 1)
        return out

    def return_(self, s, depth):
        return [f"{self.pad(depth)}return" + ("" if s.value is None else f" {self.expr(s.value)}")]

    def scope(self, s, depth):
        return self.block(s.body, depth)

    def unrolled(self, s, depth):
        out = []
        for k in range(s.n):
            self.unroll[s.var] = k
            out += self.block(s.body, depth)
        del self.unroll[s.var]
        return out

    def call(self, s, depth):
        call = f"{s.fn}({', '.join(self.expr(a) for a in s.args)})"
        return [f"{self.pad(depth)}{self.name(s.out)} = {call}" if s.out else self.pad(depth) + call]

    def physics(self, s, depth):
        args = ", ".join("(" + ", ".join(self.name(a) for a in arg) + ")" if isinstance(arg, tuple) else self.name(arg)
                         for arg in s.args)
        return [f"{self.pad(depth)}{', '.join(s.out)} = {s.fn}({args})"]

    def collide(self, s, depth):
        return [f"{self.pad(depth)}{s.out} = {self.col.format(h=self.name(s.h), x=s.x, y=s.y)}"]

    def store_step(self, s, depth):
        value = self.code.encode_step(self.name(s.value), s.i, s.seed)
        return [f"{self.pad(depth)}store_at({s.array}, {self.name(s.pos)}, {value})"]

    def seed(self, s, depth):
        return [self.pad(depth) + self.code.seed(s.name, self.name(s.h0), self.name(s.cell))] if self.code.stochastic \
            else []

    def collide_store(self, s, depth):
        """The collision of ``h`` and the stores of its nine results at ``cell`` of the even layout, inline."""
        h, pad = self.name(s.h), self.pad(depth)
        out = [f"{pad}p = {self.col.format(h=h, x=s.x, y=s.y)}"]
        if self.code.stochastic:     # the cell's seed from its pre-collision rest population (fp16c)
            out.append(pad + self.code.seed("rs", f"{h}[0]", s.cell))
        return out + [f"{pad}store_at({s.array}, {j} * N + {s.cell}, {self.code.encode_step(f'p[{j}]', j, 'rs')})"
                      for j in range(9)]

    def piece(self, s, depth):
        """A boundary rule's piece on link ``s.i``: its link constants are direction i's names."""
        names = {"w_i": f"W{s.i}", "cx_i": f"CX{s.i}", "cy_i": f"CY{s.i}"}
        return [self.pad(depth) + line for line in emit_ops(s.ops, s.own, self.code, names)]

    # the 16-bit pair kernel (pair_plan) ---------------------------------------------------------
    def pair_exchange(self, s, depth):
        """Warp shuffles, or shared memory and one barrier; the thread at the warp's / block's edge (and the last
        pair) loads the neighbouring word itself. Every thread takes part (no shuffle inside a conditional)."""
        pad, n = self.pad(depth), s.block_x
        shifted = [i for i, pull in enumerate(PAIR_PULLS) if pull.neighbour]
        if self.exchange == "shfl":
            out = [f"{pad}edge_lo = (cuda.threadIdx.x & 31) == 0",
                   f"{pad}edge_hi = (cuda.threadIdx.x & 31) == 31 or px == npairs - 1"]
        else:
            out = [f"{pad}xch = cuda.shared.array({len(shifted) * n}, int32)", f"{pad}edge_lo = cuda.threadIdx.x == 0",
                   f"{pad}edge_hi = cuda.threadIdx.x == {n - 1} or px == npairs - 1"]
            out += [f"{pad}store_at(xch, {j * n} + cuda.threadIdx.x, u{i})" for j, i in enumerate(shifted)]
            out.append(f"{pad}cuda.syncthreads()")
        for j, i in enumerate(shifted):
            d = PAIR_PULLS[i].neighbour          # -1: the previous thread's word, +1: the next thread's
            if self.exchange == "shfl":
                out.append(f"{pad}s{i} = cuda.shfl_{'up' if d < 0 else 'down'}_sync(-1, u{i}, 1)")
            nb = f"s{i}" if self.exchange == "shfl" else f"load_at(xch, {j * n + d} + cuda.threadIdx.x)"
            own = f"load_at({s.words}, {i} * NP + {PAIR_PULLS[i].row} + {'pm' if d < 0 else 'pp'})"
            out.append(f"{pad}n{i} = {own} if {'edge_lo' if d < 0 else 'edge_hi'} else {nb}")
        return out

    def pair_halves(self, s, depth):
        def half(i, word_half):
            word, hh = word_half
            return self.code.unscale(f"half_{hh}({'u' if word == 'own' else 'n'}{i})")

        return [f"{self.pad(depth)}{name} = ({', '.join(half(i, getattr(pull, side)) for i, pull in enumerate(PAIR_PULLS))})"
                for name, side in ((s.a, "a"), (s.b, "b"))]

    def pair_flags(self, s, depth):
        return [f"{self.pad(depth)}{s.a} = load_at(flags, row + x)", f"{self.pad(depth)}{s.b} = load_at(flags, row + x + 1)"]

    def pair_stores(self, s, depth):
        pad, code, n = self.pad(depth), self.code, len(PAIR_PULLS)
        if code.stochastic:
            return ([pad + code.seed("sa", s.ha0, "row + x"), pad + code.seed("sb", s.hb0, "row + x + 1")]
                    + [f"{pad}store_at({s.words}, {i} * NP + prow + px, "
                       f"{code.pack_step(f'{s.a}[{i}]', f'{s.b}[{i}]', i, 'sa', 'sb')})" for i in range(n)])
        return [f"{pad}store_at({s.words}, {i} * NP + prow + px, "
                f"pack_halves({code.scale(f'{s.a}[{i}]')}, {code.scale(f'{s.b}[{i}]')}))" for i in range(n)]

    def kernel(self, k):
        names = [name for name, _ in k.args]
        arrays = max((j + 1 for j, (_, kind) in enumerate(k.args) if kind in ("pop", "pop_in")), default=0)
        names[arrays:arrays] = [name for name, _, _ in k.views]       # the word views follow the arrays
        return ([f"def {k.name}({', '.join(names)}):"]
                + [f"    # {line}" for line in k.doc.splitlines()] + self.block(k.body, 1))

    def function(self, f):
        outs = [f"    return {', '.join(self.expr(self.returned(r)) for r in f.returns)}"] if f.returns else []
        if f.out_array:
            name, n = f.out_array
            outs = [f"    return ({', '.join(f'{name}_{j}' for j in range(n))})"]
        self.out_array = f.out_array[0] if f.out_array else ""
        body = self.block(f.body, 1)
        self.out_array = ""
        return ([f"def {f.name}({', '.join(name for name, _ in f.args)}):"]
                + [f"    # {line}" for line in f.doc.splitlines()] + body + outs)
