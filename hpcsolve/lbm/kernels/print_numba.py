"""Python syntax (for ``numba.cuda.jit``) of the kernel plan's statements (``kernel_plan``, walked by
``printer.Printer``): the printer ``emit_numba`` writes the step and moments kernels with. Physics calls are calls
of the compiled ``physics`` functions bound in the kernels' namespace; device arrays are read and written through
``load_at`` / ``store_at`` (no negative-index wraparound); population loads and stores are the policy's
(``population_code.numba_code``). An unrolled loop is written out: ``name[k]`` of a per-cell array becomes the
local ``name_<k>``."""

from __future__ import annotations

import re

from hpcsolve.lbm.boundaries.layer import ARGS as LAYER_ARGS
from hpcsolve.lbm.kernels.printer import Printer

_NAMED = {"zero": "ZERO", "zero9": "ZERO9", "block_x": "cuda.blockIdx.x", "block_y": "cuda.blockIdx.y",
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


class PythonPrinter(Printer):
    """Python of the plan's statements; ``code``: the population code, ``collision`` / ``layer``: the collision call."""

    indent = "    "

    def __init__(self, code, collision: str = "bgk", layer: bool = False):
        self.code = code
        self.col = collision_call(collision, layer)
        self.unroll: dict[str, int] = {}

    def name(self, text):
        for var, k in self.unroll.items():
            text = re.sub(rf"\b(\w+)\[{var}\]", rf"\g<1>_{k}", text)
            text = re.sub(rf"\b{var}\b", str(k), text)
        return text

    def sel(self, e, nested):
        text = f"{self.expr(e.a)} if {self.expr(e.cond)} else {self.expr(e.b)}"
        return f"({text})" if nested else text

    def cast(self, e, nested):       # the value, grouped as the C cast groups it
        return self.expr(e.value, True)

    def and_(self, e, nested):
        text = f"{self.expr(e.a)} and {self.expr(e.b)}"
        return f"({text})" if nested else text

    def conv(self, e, nested):
        return f"{_CONV[e.type]}({self.expr(e.value)})"

    def pop(self, e, nested):
        return self.code.decode(f"load_at({e.array}, {self.expr(e.pos)})")

    def at(self, e, nested):
        return f"load_at({e.array}, {self.expr(e.index)})"

    def named(self, e, nested):
        return _NAMED[e.name]

    def idiv(self, e, nested):
        text = f"{self.expr(e.a, True)} // {self.expr(e.b, True)}"
        return f"({text})" if nested else text

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

    def kernel(self, k):
        return ([f"def {k.name}({', '.join(name for name, _ in k.args)}):"]
                + [f"    # {line}" for line in k.doc.splitlines()] + self.block(k.body, 1))

    def function(self, f):
        outs = [f"    return {', '.join(self.expr(self.returned(r)) for r in f.returns)}"] if f.returns else []
        return ([f"def {f.name}({', '.join(name for name, _ in f.args)}):"]
                + [f"    # {line}" for line in f.doc.splitlines()] + self.block(f.body, 1) + outs)
