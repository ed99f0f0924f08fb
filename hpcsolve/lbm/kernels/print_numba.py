"""The LBM's Numba printer: the code generator's Python printer (``hpcsolve.core.codegen.numba``) with the LBM's own
node types (``kernel_plan``), one ``visit_<ClassName>`` method each; the printer ``emit_numba`` writes the step and
moments kernels with. Physics calls are calls of the compiled ``physics`` functions bound in the kernels' namespace;
device arrays are read and written through ``load_at`` / ``store_at`` (no negative-index wraparound); population
loads and stores are the policy's (``population_code.numba_code``)."""

from __future__ import annotations

from hpcsolve.core.codegen import numba as core_numba
from hpcsolve.core.codegen.printer import Visitor
from hpcsolve.lbm import collision as collision_models
from hpcsolve.lbm.kernels.layer_code import ARGS as LAYER_ARGS
from hpcsolve.lbm.kernels.kernel_plan import PAIR_PULLS

_NAMED = {**core_numba.PythonPrinter.NAMED, "zero9": "ZERO9", "hash_mult": "HASH_MULT", "shift32": "SHIFT32"}


def collision_call(collision: str, layer: bool) -> str:
    """The collision call of the step kernels, ``{h}`` the populations; with the absorbing layer (``boundaries.layer``)
    also ``{x}``, ``{y}``: the cell's lattice indices."""
    fn, names = collision_models.get(collision).kernel_call(layer)
    lay = "layer_coefficient({x}, {y}, " + ", ".join(LAYER_ARGS) + ")"
    return f"{fn}({{h}}, " + ", ".join(lay if n == "layer" else n for n in names) + ")"


class OpPrinter(Visitor):
    """Python statements of a kernel piece (``kernel_plan.PieceOp`` s), one method per statement type. Every name
    passes through as it is (the piece's names, kernel locals, ``ZERO``: Python names of the kernel's namespace) except
    those ``names`` maps (the link constants ``w_i`` / ``cx_i`` / ``cy_i`` to direction i's ``W<i>`` / ``CX<i>`` /
    ``CY<i>``); a physics op calls the device function of that name (``physics.physics_for(..., jit=...)``, bound by
    ``kernels_numba.compiled_kernels``). ``own``: where the cell's velocity at time t is
    (``StepLayout.own_velocity``), fetched once per cell (flag ``have_own``); list kernels: None."""

    def __init__(self, own: str | None, code, names: dict | None = None):
        self.own, self.code, self.names = own, code, names or {}

    def visit_Lookup(self, op):
        return [f"{op.out[0]}, {op.out[1]} = boundary_velocity(vel_cells, vel_u, n_vel, {op.args[0]})"]

    def visit_OwnVelocity(self, op):
        ux, uy = op.out
        fetch = ([f"{ux}, {uy} = own_velocity(A, N, cell)"] if self.own == "stored" else
                 ["t = outlet_index(out_cells, n_out, cell)", f"{ux} = own_u[t]", f"{uy} = own_u[n_out + t]"])
        return ["if not have_own:", *("    " + line for line in fetch), "    have_own = True"]

    def visit_PhysicsOp(self, op):
        return [f"{', '.join(op.out)} = {op.fn}({', '.join(self.names.get(a, a) for a in op.args)})"]

    def visit_Load(self, op):
        return [f"{op.out[0]} = load_pop({op.args[0]}, {op.args[1]})"]

    def visit_Widen(self, op):
        return [f"{op.out[0]} = float64({op.args[0]})"]

    def visit_Expr(self, op):
        return [f"{op.out[0]} = " + (op.args[0] if op.fn == "double" else f"CT({op.args[0]})")]

    def visit_Store(self, op):
        array, index, value = op.args
        return [f"{array}[{index}] = {self.code.encode(value)}"]

    def visit_Copy(self, op):
        dst, di, src, si = op.args
        return [f"{dst}[{di}] = {src}[{si}]"]

    def visit_AtomicAdd(self, op):
        return [f"cuda.atomic.add({op.args[0]}, {op.args[1]}, {op.args[2]})"]


def emit_ops(ops, own: str | None, code, names: dict | None = None) -> list[str]:
    """Python statements of a kernel piece (:class:`OpPrinter`)."""
    printer = OpPrinter(own, code, names)
    return [line for op in ops for line in printer.visit(op)]


class PythonPrinter(core_numba.PythonPrinter):
    """Python of the plan's statements; ``code``: the population code, ``collision`` / ``layer``: the collision call,
    ``exchange``: how the pair kernel passes words between threads (``"shfl"``: warp shuffles, GPU only; ``"smem"``:
    shared memory and one barrier, also under the simulator, which has no shuffles)."""

    NAMED = _NAMED
    VIEWED = ("pop", "pop_in")

    def __init__(self, code, collision: str = "bgk", layer: bool = False, exchange: str = "smem"):
        super().__init__()
        self.code, self.exchange = code, exchange
        self.col = collision_call(collision, layer)

    def visit_Pop(self, e, nested):
        return self.code.decode(f"load_at({e.array}, {self.expr(e.pos)})")

    def visit_Physics(self, s, depth):
        args = ", ".join("(" + ", ".join(self.name(a) for a in arg) + ")" if isinstance(arg, tuple) else self.name(arg)
                         for arg in s.args)
        return [f"{self.pad(depth)}{', '.join(s.out)} = {s.fn}({args})"]

    def visit_Collide(self, s, depth):
        return [f"{self.pad(depth)}{s.out} = {self.col.format(h=self.name(s.h), x=s.x, y=s.y)}"]

    def visit_StoreStep(self, s, depth):
        value = self.code.encode_step(self.name(s.value), s.i, s.seed)
        return [f"{self.pad(depth)}store_at({s.array}, {self.name(s.pos)}, {value})"]

    def visit_Seed(self, s, depth):
        return [self.pad(depth) + self.code.seed(s.name, self.name(s.h0), self.name(s.cell))] if self.code.stochastic \
            else []

    def visit_CollideStore(self, s, depth):
        """The collision of ``h`` and the stores of its nine results at ``cell`` of the even layout, inline."""
        h, pad = self.name(s.h), self.pad(depth)
        out = [f"{pad}p = {self.col.format(h=h, x=s.x, y=s.y)}"]
        if self.code.stochastic:     # the cell's seed from its pre-collision rest population (fp16c)
            out.append(pad + self.code.seed("rs", f"{h}[0]", s.cell))
        return out + [f"{pad}store_at({s.array}, {j} * N + {s.cell}, {self.code.encode_step(f'p[{j}]', j, 'rs')})"
                      for j in range(9)]

    def visit_Piece(self, s, depth):
        """A boundary rule's piece on link ``s.i``: its link constants are direction i's names."""
        names = {"w_i": f"W{s.i}", "cx_i": f"CX{s.i}", "cy_i": f"CY{s.i}"}
        return [self.pad(depth) + line for line in emit_ops(s.ops, s.own, self.code, names)]

    # the 16-bit pair kernel (pair_plan) ---------------------------------------------------------
    def visit_PairExchange(self, s, depth):
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

    def visit_PairHalves(self, s, depth):
        def half(i, word_half):
            word, hh = word_half
            return self.code.unscale(f"half_{hh}({'u' if word == 'own' else 'n'}{i})")

        return [f"{self.pad(depth)}{name} = ({', '.join(half(i, getattr(pull, side)) for i, pull in enumerate(PAIR_PULLS))})"
                for name, side in ((s.a, "a"), (s.b, "b"))]

    def visit_PairFlags(self, s, depth):
        return [f"{self.pad(depth)}{s.a} = load_at(flags, row + x)", f"{self.pad(depth)}{s.b} = load_at(flags, row + x + 1)"]

    def visit_PairStores(self, s, depth):
        pad, code, n = self.pad(depth), self.code, len(PAIR_PULLS)
        if code.stochastic:
            return ([pad + code.seed("sa", s.ha0, "row + x"), pad + code.seed("sb", s.hb0, "row + x + 1")]
                    + [f"{pad}store_at({s.words}, {i} * NP + prow + px, "
                       f"{code.pack_step(f'{s.a}[{i}]', f'{s.b}[{i}]', i, 'sa', 'sb')})" for i in range(n)])
        return [f"{pad}store_at({s.words}, {i} * NP + prow + px, "
                f"pack_halves({code.scale(f'{s.a}[{i}]')}, {code.scale(f'{s.b}[{i}]')}))" for i in range(n)]
