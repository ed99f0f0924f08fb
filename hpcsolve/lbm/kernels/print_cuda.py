"""CUDA C syntax of the kernel plan's statements (``kernel_plan``, walked by ``printer.Printer``): the printer
``emit_cuda`` writes the step and moments kernels with. Physics calls are traced into straight-line C
(``trace_c``); population loads and stores are the policy's (``population_code.cuda_code``)."""

from __future__ import annotations

from hpcsolve.lbm.boundaries.layer import ARGS as LAYER_ARGS
from hpcsolve.lbm.kernels.cell_table import HASH_MULT
from hpcsolve.lbm.kernels.printer import Printer
from hpcsolve.lbm.kernels.trace_c import Sym, Tracer, live_lines

#: C types of the plan's kernel types
C_TYPE = {"index": "long long", "int": "int", "real": "real_t", "double": "double", "bool": "bool",
          "u64": "unsigned long long"}

#: C parameter types of the plan's kernel argument kinds
C_ARG = {"pop": "store_t* __restrict__", "pop_in": "const store_t* __restrict__",
         "index": "const long long* __restrict__", "index_in": "const long long* __restrict__",
         "real": "const real_t* __restrict__", "real_in": "const real_t* __restrict__", "real_value": "const real_t",
         "real_out": "real_t* __restrict__", "real_plain": "const real_t*",
         "real_ptr": "real_t*",
         "index_value": "const long long",
         "real_io": "real_t* __restrict__", "flags": "const unsigned char* __restrict__", "int": "const int",
         "f64": "const double* __restrict__", "f64_out": "double* __restrict__"}

_NAMED = {"zero": "0", "block_x": "blockIdx.x", "block_y": "blockIdx.y", "thread_x": "threadIdx.x",
          "thread": "(long long)blockIdx.x * blockDim.x + threadIdx.x", "hash_mult": f"{HASH_MULT:#x}ull",
          "shift32": "32"}


def bounds(block_x: int, max_registers: int | None) -> str:
    """The step kernels' launch qualifier: ``__launch_bounds__(block_x)``, or with a register cap
    ``__maxnreg__(max_registers)``. ptxas ignores ``--maxrregcount`` for a kernel with launch bounds (and the two
    qualifiers cannot be combined), so the cap is the kernel's own qualifier (CUDA 12.4 or newer). None or 0: no cap."""
    return f"__maxnreg__({int(max_registers)})" if max_registers else f"__launch_bounds__({block_x})"


def layer_arg(layer: bool, x: str, y: str) -> str:
    """The absorbing layer's coefficient of cell (x, y) as a trailing argument ("" without a layer)."""
    return f", layer_coefficient({x}, {y}, " + ", ".join(LAYER_ARGS) + ")" if layer else ""


def store_step(code, h: str, i: int) -> str:
    """The store of direction i's value h in a step kernel (``store_pop``, or stochastic with the seed ``rs``)."""
    return code.encode_step(h, i, "rs") if code is not None and code.stochastic else f"store_pop({h})"


class CPrinter(Printer):
    """CUDA C of the plan's statements; ``P``: the traced physics, ``code``: the population code, ``layer``: the
    collision takes the absorbing layer's coefficient, ``block_x`` / ``max_registers``: the launch qualifier."""

    def __init__(self, P, code, layer: bool = False, block_x: int = 256, max_registers: int | None = None):
        self.P, self.code, self.layer = P, code, layer
        self.block_x, self.max_registers = block_x, max_registers
        self.env: dict[str, str] = {}

    def name(self, text):
        return self.env.get(text, text)

    def sel(self, e, nested):
        text = f"({self.expr(e.cond)}) ? {self.expr(e.a)} : {self.expr(e.b)}"
        return f"({text})" if nested else text

    def cast(self, e, nested):
        return f"({C_TYPE[e.type]}){self.expr(e.value, True)}"

    def and_(self, e, nested):
        text = f"{self.expr(e.a)} && {self.expr(e.b)}"
        return f"({text})" if nested else text

    def conv(self, e, nested):
        return f"({C_TYPE[e.type]}){self.expr(e.value, True)}"

    def pop(self, e, nested):
        return f"load_pop({e.array}[{self.expr(e.pos)}])"

    def at(self, e, nested):
        return f"{e.array}[{self.expr(e.index)}]"

    def named(self, e, nested):
        return _NAMED[e.name]

    def idiv(self, e, nested):
        text = f"{self.expr(e.a, True)} / {self.expr(e.b, True)}"
        return f"({text})" if nested else text

    def let(self, s, depth):
        return [f"{self.pad(depth)}const {C_TYPE[s.type]} {s.name} = {self.expr(s.value)};"]

    def var(self, s, depth):
        return [f"{self.pad(depth)}{C_TYPE[s.type]} {s.name} = {self.expr(s.value)};"]

    def while_(self, s, depth):
        return ([f"{self.pad(depth)}while ({self.expr(s.cond)}) {{"] + self.block(s.body, depth + 1)
                + [f"{self.pad(depth)}}}"])

    def decl(self, s, depth):
        return [f"{self.pad(depth)}{C_TYPE[s.type]} {s.name}" + "".join(f"[{n}]" for n in s.shape) + ";"]

    def set_(self, s, depth):
        return [f"{self.pad(depth)}{s.target} = {self.expr(s.value)};"]

    def if_(self, s, depth):
        head = f"{self.pad(depth)}if ({self.expr(s.cond)})"
        if s.compact:
            return [head] + self.block(s.then, depth + 1)
        note = f"   // {s.note}" if s.note else ""
        out = [f"{head} {{{note}"] + self.block(s.then, depth + 1)
        if s.orelse:
            out += [f"{self.pad(depth)}}} else {{"] + self.block(s.orelse, depth + 1)
        return out + [f"{self.pad(depth)}}}"]

    def return_(self, s, depth):
        return [f"{self.pad(depth)}return" + ("" if s.value is None else f" {self.expr(s.value)}") + ";"]

    def scope(self, s, depth):
        return [f"{self.pad(depth)}{{"] + self.block(s.body, depth + 1) + [f"{self.pad(depth)}}}"]

    def unrolled(self, s, depth):
        if s.compact:
            (line,) = self.block(s.body, 0)
            return ["#pragma unroll", f"{self.pad(depth)}for (int {s.var} = 0; {s.var} < {s.n}; ++{s.var}) {line}"]
        return (["#pragma unroll", f"{self.pad(depth)}for (int {s.var} = 0; {s.var} < {s.n}; ++{s.var}) {{"]
                + self.block(s.body, depth + 1) + [f"{self.pad(depth)}}}"])

    def call(self, s, depth):
        args = [self.expr(a) for a in s.args] + ([s.out] if s.out else [])
        return [f"{self.pad(depth)}{s.fn}({', '.join(args)});"]

    def physics(self, s, depth):
        tr = Tracer(self.code.real_t, self.code.suffix, f"{s.tag or s.fn[0]}_")
        args = [tuple(Sym(tr, self.name(a)) for a in arg) if isinstance(arg, tuple) else Sym(tr, self.name(arg))
                for arg in s.args]
        out = getattr(self.P, s.fn)(*args)
        outs = [tr.operand(v) for v in (out if isinstance(out, tuple) else (out,))]
        self.env.update(zip(s.out, outs))
        return [self.pad(depth) + line for line in live_lines(tr.lines, outs)]

    def collide(self, s, depth):
        return [f"{self.pad(depth)}collide_values({s.h}, {s.out}, omega_plus, omega_minus"
                f"{layer_arg(self.layer, s.x, s.y)});"]

    def store_step(self, s, depth):
        return [f"{self.pad(depth)}{s.array}[{s.pos}] = {store_step(self.code, s.value, s.i)};"]

    def seed(self, s, depth):
        stochastic = self.code is not None and self.code.stochastic
        return [self.pad(depth) + self.code.seed(s.name, s.h0, s.cell)] if stochastic else []

    def collide_store(self, s, depth):
        return [f"{self.pad(depth)}collide_store({s.h}, {s.array}, N, {s.cell}, omega_plus, omega_minus"
                f"{layer_arg(self.layer, s.x, s.y)});"]

    def kernel(self, k):
        args = ", ".join(f"{C_ARG[kind]} {name}" for name, kind in k.args)
        head = 'extern "C" __global__ void ' + (bounds(self.block_x, self.max_registers) + "\n" if k.bounds else "")
        return (["", *(f"// {line}" for line in k.doc.splitlines()), f"{head}{k.name}({args}) {{"]
                + self.block(k.body, 1) + ["}"])

    def function(self, f):
        args = [f"{C_ARG[kind]} {name}" for name, kind in f.args] + [f"{C_TYPE[r[1]]}* {r[0]}" for r in f.returns]
        inline = "__forceinline__ " if f.inline else ""
        body = self.block(f.body, 1)          # binds the names the outputs are written from
        outs = [f"  {' '.join(f'*{r[0]} = {self.expr(self.returned(r))};' for r in f.returns)}"] if f.returns else []
        result = C_TYPE[f.result] if f.result else "void"
        return ([f"// {line}" for line in f.doc.splitlines()]
                + [f"__device__ {inline}{result} {f.name}({', '.join(args)}) {{"] + body + outs + ["}"])
