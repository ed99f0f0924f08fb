"""The LBM's CUDA C printer: the code generator's C printer (``hpcsolve.core.codegen.c``) with the LBM's own node
types (``kernel_plan``: populations, the traced physics, the collision, the boundary pieces, the pair kernel), one
``visit_<ClassName>`` method each; the printer ``emit_cuda`` writes the step and moments kernels with. Physics
calls are traced into straight-line C (``trace_c``); population loads and stores are the policy's
(``population_code.cuda_code``)."""

from __future__ import annotations

from hpcsolve.core.codegen import c as core_c
from hpcsolve.core.codegen.printer import Visitor
from hpcsolve.lbm.kernels.layer_code import ARGS as LAYER_ARGS
from hpcsolve.lbm.kernels.cell_table import HASH_MULT
from hpcsolve.lbm.kernels.kernel_plan import PAIR_PULLS, link_constants
from hpcsolve.lbm.kernels.trace_c import Sym, Tracer, live_lines

#: C parameter types of the plan's kernel argument kinds
C_ARG = {"pop": "store_t* __restrict__", "pop_in": "const store_t* __restrict__",
         "index": "const long long* __restrict__", "index_in": "const long long* __restrict__",
         "real": "const real_t* __restrict__", "real_in": "const real_t* __restrict__", "real_value": "const real_t",
         "real_out": "real_t* __restrict__", "real_plain": "const real_t*",
         "real_ptr": "real_t*",
         "index_value": "const long long",
         "real_io": "real_t* __restrict__", "flags": "const unsigned char* __restrict__", "int": "const int",
         "f64": "const double* __restrict__", "f64_out": "double* __restrict__"}

_NAMED = {**core_c.CPrinter.NAMED, "hash_mult": f"{HASH_MULT:#x}ull", "shift32": "32"}


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


class OpPrinter(Visitor):
    """C statements of a kernel piece (``kernel_plan.PieceOp`` s), one method per statement type; ``env`` maps the
    piece's names to C expressions (str) or constants (the link constants, traced as literals); ``own``: where the
    cell's velocity at time t is (``StepLayout.own_velocity``; list kernels: None)."""

    def __init__(self, P, code, own: str | None, env: dict, prefix: str):
        self.P, self.own, self.env = P, own, dict(env)
        self.tr = Tracer(code.real_t, code.suffix, prefix)
        self.lines = self.tr.lines

    def visit_Lookup(self, op):
        a, b = op.out
        self.lines.append(f"real_t {a}, {b};")
        self.lines.append(f"boundary_velocity(vel_cells, vel_u, n_vel, {op.args[0]}, &{a}, &{b});")
        self.env[a], self.env[b] = a, b

    def visit_OwnVelocity(self, op):
        ux, uy = op.out
        fetch = ("own_velocity(A, N, cell, " if self.own == "stored"
                 else "outlet_velocity(out_cells, own_u, n_out, cell, ")
        self.lines.append(f"if (!have_own) {{ {fetch}&{ux}, &{uy}); have_own = true; }}")
        self.env[ux], self.env[uy] = ux, uy

    def visit_PhysicsOp(self, op):
        vals = [self.env.get(a, a) for a in op.args]      # a name of the piece, or a C expression (a[k])
        args = [Sym(self.tr, v) if isinstance(v, str) else v for v in vals]
        out = getattr(self.P, op.fn)(*args)
        outs = out if isinstance(out, tuple) else (out,)
        self.env.update({name: self.tr.operand(v) for name, v in zip(op.out, outs)})

    def visit_Load(self, op):
        (name,), (array, index) = op.out, op.args
        self.lines.append(f"const real_t {name} = load_pop({array}[{index}]);")
        self.env[name] = name

    def visit_Widen(self, op):
        (name,), (value,) = op.out, op.args
        self.lines.append(f"const double {name} = (double){self.env.get(value, value)};")
        self.env[name] = name

    def visit_Expr(self, op):
        (name,), (text,) = op.out, op.args
        self.lines.append(f"const {'double' if op.fn == 'double' else 'real_t'} {name} = {text};")
        self.env[name] = name

    def visit_Store(self, op):
        array, index, value = op.args
        self.lines.append(f"{array}[{index}] = store_pop({self.env.get(value, value)});")

    def visit_Copy(self, op):
        dst, di, src, si = op.args
        self.lines.append(f"{dst}[{di}] = {src}[{si}];")

    def visit_AtomicAdd(self, op):
        array, index, value = op.args
        self.lines.append(f"atomicAdd(&{array}[{index}], {self.env.get(value, value)});")


def emit_ops(ops, P, code, own: str | None, env: dict, prefix: str) -> tuple[list[str], dict]:
    """C statements of a kernel piece (:class:`OpPrinter`). Returns the statements and the updated names."""
    printer = OpPrinter(P, code, own, env, prefix)
    for op in ops:
        printer.visit(op)
    return printer.lines, printer.env


class CPrinter(core_c.CPrinter):
    """CUDA C of the plan's statements; ``P``: the traced physics, ``code``: the population code, ``layer``: the
    collision takes the absorbing layer's coefficient, ``block_x`` / ``max_registers``: the launch qualifier."""

    NAMED = _NAMED
    ARGS = C_ARG

    def __init__(self, P, code, layer: bool = False, block_x: int = 256, max_registers: int | None = None):
        self.P, self.code, self.layer = P, code, layer
        self.block_x, self.max_registers = block_x, max_registers
        self.env: dict[str, str] = {}

    def name(self, text):
        return self.env.get(text, text)

    def launch_qualifier(self) -> str:
        return bounds(self.block_x, self.max_registers)

    def visit_Pop(self, e, nested):
        return f"load_pop({e.array}[{self.expr(e.pos)}])"

    def visit_Physics(self, s, depth):
        tr = Tracer(self.code.real_t, self.code.suffix, f"{s.tag or s.fn[0]}_")
        args = [tuple(Sym(tr, self.name(a)) for a in arg) if isinstance(arg, tuple) else Sym(tr, self.name(arg))
                for arg in s.args]
        out = getattr(self.P, s.fn)(*args)
        outs = [tr.operand(v) for v in (out if isinstance(out, tuple) else (out,))]
        self.env.update(zip(s.out, outs))
        return [self.pad(depth) + line for line in live_lines(tr.lines, outs)]

    def visit_Collide(self, s, depth):
        return [f"{self.pad(depth)}collide_values({s.h}, {s.out}, omega_plus, omega_minus"
                f"{layer_arg(self.layer, s.x, s.y)});"]

    def visit_StoreStep(self, s, depth):
        return [f"{self.pad(depth)}{s.array}[{s.pos}] = {store_step(self.code, s.value, s.i)};"]

    def visit_Seed(self, s, depth):
        stochastic = self.code is not None and self.code.stochastic
        return [self.pad(depth) + self.code.seed(s.name, s.h0, s.cell)] if stochastic else []

    def visit_CollideStore(self, s, depth):
        return [f"{self.pad(depth)}collide_store({s.h}, {s.array}, N, {s.cell}, omega_plus, omega_minus"
                f"{layer_arg(self.layer, s.x, s.y)});"]

    def visit_Piece(self, s, depth):
        """A boundary rule's piece on link ``s.i``, traced with that link's constants; its value ``h`` is bound."""
        lines, env = emit_ops(s.ops, self.P, self.code, s.own, {"hop": "hop", **link_constants(self.P, s.i)}, s.tag)
        self.env.update((k, v) for k, v in env.items() if isinstance(v, str))
        return [self.pad(depth) + " ".join(lines)]

    # the 16-bit pair kernel (pair_plan) ---------------------------------------------------------
    def visit_PairExchange(self, s, depth):
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

    def visit_PairHalves(self, s, depth):
        w, pad = self.code.pair_words, self.pad(depth)

        def half(i, word_half):
            word, hh = word_half
            return self.code.unscale(f"{w['high' if hh == 'hi' else 'low']}({'u' if word == 'own' else 'n'}{i})")

        return ([f"{pad}real_t {s.a}[{len(PAIR_PULLS)}], {s.b}[{len(PAIR_PULLS)}];"]
                + [f"{pad}{s.a}[{i}] = {half(i, pull.a)}; {s.b}[{i}] = {half(i, pull.b)};"
                   for i, pull in enumerate(PAIR_PULLS)])

    def visit_PairFlags(self, s, depth):
        pad = self.pad(depth)
        return [f"{pad}const uchar2 fl = *reinterpret_cast<const uchar2*>(flags + row + x);",
                f"{pad}const int {s.a} = fl.x;", f"{pad}const int {s.b} = fl.y;"]

    def visit_PairStores(self, s, depth):
        pad, code, pos = self.pad(depth), self.code, lambda i: f"{s.words}[{i} * NP + prow + px]"
        if code.stochastic:
            return ([pad + code.seed("sa", s.ha0, "row + x"), pad + code.seed("sb", s.hb0, "row + x + 1")]
                    + [f"{pad}{pos(i)} = {code.pack_step(f'{s.a}[{i}]', f'{s.b}[{i}]', i, 'sa', 'sb')};"
                       for i in range(len(PAIR_PULLS))])
        pack = code.pair_words["pack"]
        return [f"{pad}{pos(i)} = {pack}({code.scale(f'{s.a}[{i}]')}, {code.scale(f'{s.b}[{i}]')});"
                for i in range(len(PAIR_PULLS))]
