"""CUDA C syntax of the kernel plan's statements (``kernel_plan``, walked by ``printer.Printer``): the printer
``emit_cuda`` writes the step and moments kernels with. Physics calls are traced into straight-line C
(``trace_c``); population loads and stores are the policy's (``population_code.cuda_code``)."""

from __future__ import annotations

from hpcsolve.lbm.boundaries.layer import ARGS as LAYER_ARGS
from hpcsolve.lbm.kernels.cell_table import HASH_MULT
from hpcsolve.lbm.kernels.kernel_plan import PAIR_PULLS, link_constants
from hpcsolve.lbm.kernels.printer import Printer
from hpcsolve.lbm.kernels.trace_c import Sym, Tracer, live_lines

#: C types of the plan's kernel types
C_TYPE = {"index": "long long", "int": "int", "real": "real_t", "double": "double", "bool": "bool",
          "u64": "unsigned long long", "word": "word_t"}

#: C parameter types of the plan's kernel argument kinds
C_ARG = {"pop": "store_t* __restrict__", "pop_in": "const store_t* __restrict__",
         "index": "const long long* __restrict__", "index_in": "const long long* __restrict__",
         "real": "const real_t* __restrict__", "real_in": "const real_t* __restrict__", "real_value": "const real_t",
         "real_out": "real_t* __restrict__", "real_plain": "const real_t*",
         "real_ptr": "real_t*",
         "index_value": "const long long",
         "real_io": "real_t* __restrict__", "flags": "const unsigned char* __restrict__", "int": "const int",
         "f64": "const double* __restrict__", "f64_out": "double* __restrict__"}

_NAMED = {"zero": "0", "false": "false", "block_x": "blockIdx.x", "block_y": "blockIdx.y", "thread_x": "threadIdx.x",
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


def emit_ops(ops, P, code, own: str | None, env: dict, prefix: str) -> tuple[list[str], dict]:
    """C statements of a kernel piece (``kernel_plan.Op``s); ``env`` maps the piece's names to C
    expressions (str) or constants (the link constants, traced as literals). Returns the statements and
    the updated names. ``own``: where the cell's velocity at time t is (``StepLayout.own_velocity``; list kernels:
    None)."""
    tr = Tracer(code.real_t, code.suffix, prefix)
    env = dict(env)
    for op in ops:
        if op.kind == "lookup":
            a, b = op.out
            tr.lines.append(f"real_t {a}, {b};")
            tr.lines.append(f"boundary_velocity(vel_cells, vel_u, n_vel, {op.args[0]}, &{a}, &{b});")
            env[a], env[b] = a, b
        elif op.kind == "own_velocity":
            ux, uy = op.out
            fetch = ("own_velocity(A, N, cell, " if own == "stored"
                     else "outlet_velocity(out_cells, own_u, n_out, cell, ")
            tr.lines.append(f"if (!have_own) {{ {fetch}&{ux}, &{uy}); have_own = true; }}")
            env[ux], env[uy] = ux, uy
        elif op.kind == "physics":
            vals = [env.get(a, a) for a in op.args]      # a name of the piece, or a C expression (a[k])
            args = [Sym(tr, v) if isinstance(v, str) else v for v in vals]
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


class CPrinter(Printer):
    """CUDA C of the plan's statements; ``P``: the traced physics, ``code``: the population code, ``layer``: the
    collision takes the absorbing layer's coefficient, ``block_x`` / ``max_registers``: the launch qualifier."""

    NAMED = _NAMED

    def __init__(self, P, code, layer: bool = False, block_x: int = 256, max_registers: int | None = None):
        self.P, self.code, self.layer = P, code, layer
        self.block_x, self.max_registers = block_x, max_registers
        self.env: dict[str, str] = {}

    def name(self, text):
        return self.env.get(text, text)

    def sel(self, e, nested):
        text = f"({self.expr(e.cond)}) ? {self.expr(e.a)} : {self.expr(e.b)}"
        return self.group(text, nested)

    def cast(self, e, nested):
        return f"({C_TYPE[e.type]}){self.expr(e.value, True)}"

    def conv(self, e, nested):
        return f"({C_TYPE[e.type]}){self.expr(e.value, True)}"

    def pop(self, e, nested):
        return f"load_pop({e.array}[{self.expr(e.pos)}])"

    def at(self, e, nested):
        return f"{e.array}[{self.expr(e.index)}]"

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

    def piece(self, s, depth):
        """A boundary rule's piece on link ``s.i``, traced with that link's constants; its value ``h`` is bound."""
        lines, env = emit_ops(s.ops, self.P, self.code, s.own, {"hop": "hop", **link_constants(self.P, s.i)}, s.tag)
        self.env.update((k, v) for k, v in env.items() if isinstance(v, str))
        return [self.pad(depth) + " ".join(lines)]

    # the 16-bit pair kernel (pair_plan) ---------------------------------------------------------
    def pair_exchange(self, s, depth):
        """Warp shuffles; lane 0 / lane 31 (and the last pair) load the neighbouring word themselves."""
        pad, shifted = self.pad(depth), [i for i, pull in enumerate(PAIR_PULLS) if pull.neighbour]
        out = [f"{pad}const int lane = threadIdx.x & 31;", f"{pad}const bool last = (lane == 31) || (px == npairs - 1);",
               f"{pad}word_t {', '.join(f'n{i}' for i in shifted)};"]
        for i in shifted:
            var, shfl, edge, at = (("up", "__shfl_up_sync", "lane == 0", "pm") if PAIR_PULLS[i].neighbour < 0
                                   else ("dn", "__shfl_down_sync", "last", "pp"))
            out.append(f"{pad}{{ const word_t {var} = {shfl}(0xffffffffu, u{i}, 1); "
                       f"n{i} = {edge} ? {s.words}[{i} * NP + {PAIR_PULLS[i].row} + {at}] : {var}; }}")
        return out

    def pair_halves(self, s, depth):
        w, pad = self.code.pair_words, self.pad(depth)

        def half(i, word_half):
            word, hh = word_half
            return self.code.unscale(f"{w['high' if hh == 'hi' else 'low']}({'u' if word == 'own' else 'n'}{i})")

        return ([f"{pad}real_t {s.a}[{len(PAIR_PULLS)}], {s.b}[{len(PAIR_PULLS)}];"]
                + [f"{pad}{s.a}[{i}] = {half(i, pull.a)}; {s.b}[{i}] = {half(i, pull.b)};"
                   for i, pull in enumerate(PAIR_PULLS)])

    def pair_flags(self, s, depth):
        pad = self.pad(depth)
        return [f"{pad}const uchar2 fl = *reinterpret_cast<const uchar2*>(flags + row + x);",
                f"{pad}const int {s.a} = fl.x;", f"{pad}const int {s.b} = fl.y;"]

    def pair_stores(self, s, depth):
        pad, code, pos = self.pad(depth), self.code, lambda i: f"{s.words}[{i} * NP + prow + px]"
        if code.stochastic:
            return ([pad + code.seed("sa", s.ha0, "row + x"), pad + code.seed("sb", s.hb0, "row + x + 1")]
                    + [f"{pad}{pos(i)} = {code.pack_step(f'{s.a}[{i}]', f'{s.b}[{i}]', i, 'sa', 'sb')};"
                       for i in range(len(PAIR_PULLS))])
        pack = code.pair_words["pack"]
        return [f"{pad}{pos(i)} = {pack}({code.scale(f'{s.a}[{i}]')}, {code.scale(f'{s.b}[{i}]')});"
                for i in range(len(PAIR_PULLS))]

    def kernel(self, k):
        args = ", ".join(f"{C_ARG[kind]} {name}" for name, kind in k.args)
        head = 'extern "C" __global__ void ' + (bounds(self.block_x, self.max_registers) + "\n" if k.bounds else "")
        views = [f"  {'const ' if kind == 'words_in' else ''}word_t* __restrict__ {name} = "
                 f"reinterpret_cast<{'const ' if kind == 'words_in' else ''}word_t*>({array});"
                 for name, array, kind in k.views]
        return (["", *(f"// {line}" for line in k.doc.splitlines()), f"{head}{k.name}({args}) {{"]
                + views + self.block(k.body, 1) + ["}"])

    def function(self, f):
        args = ([f"{C_ARG[kind]} {name}" for name, kind in f.args] + [f"{C_TYPE[r[1]]}* {r[0]}" for r in f.returns]
                + ([f"real_t* {f.out_array[0]}"] if f.out_array else []))
        inline = "__forceinline__ " if f.inline else ""
        body = self.block(f.body, 1)          # binds the names the outputs are written from
        outs = [f"  {' '.join(f'*{r[0]} = {self.expr(self.returned(r))};' for r in f.returns)}"] if f.returns else []
        result = C_TYPE[f.result] if f.result else "void"
        return ([f"// {line}" for line in f.doc.splitlines()]
                + [f"__device__ {inline}{result} {f.name}({', '.join(args)}) {{"] + body + outs + ["}"])
