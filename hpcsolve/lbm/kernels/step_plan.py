"""The step and moments kernels of the LBM, described once in the plan's vocabulary (``kernel_plan``: ``Let``,
``If``, ``Unrolled``, ``Pop``, ``Collide``, ...) and printed by both emitters (``emit_cuda``: CUDA C,
``emit_numba``: Python for ``numba.cuda.jit``).

The kernels' locals are those of ``kernel_plan``'s docstring (``N``, ``row`` / ``rowm`` / ``rowp``, ``x`` / ``xm``
/ ``xp``, ``cell``); positions come from the step and state layouts.
"""

from __future__ import annotations

from hpcsolve.lbm import lattice
from hpcsolve.lbm.flags import BOUNDARY_BIT, FLUID, WALL
from hpcsolve.lbm.kernels.layer_code import ARGS as LAYER_ARGS
from hpcsolve.lbm.kernels.kernel_plan import (EVEN, SOURCE, At, Block, Call, Cast, Collide, CollideStore, Decl,
                                              Fmt, Function, IDiv, If, Kernel, Let, Named, Physics, Piece, Pop,
                                              Return, Seed, Sel, Set, StoreStep, Unrolled, Var)

Q = lattice.Q

#: the populations of one cell as the names h0 .. h8 (the argument tuple of ``physics.moments``)
H_NAMES = tuple(f"h{i}" for i in range(Q))


def grid_size() -> Let:
    """N = nx * ny, the cells of the grid."""
    return Let("N", "index", Fmt("{} * ny", (Cast("index", "nx"),)))


def cell_coords() -> tuple:
    """y, x of the flat index ``cell``."""
    return (Let("y", "int", Cast("int", IDiv("cell", "nx"))),
            Let("x", "int", Cast("int", Fmt("cell - {} * nx", (Cast("index", "y"),)))))


def rows() -> tuple:
    """row, rowm, rowp: the rows y, y - 1, y + 1 (periodic) times nx."""
    return (Let("row", "index", Fmt("{} * nx", (Cast("index", "y"),))),
            Let("rowm", "index", Fmt("{} * nx", (Cast("index", Sel("y == 0", "ny - 1", "y - 1")),))),
            Let("rowp", "index", Fmt("{} * nx", (Cast("index", Sel("y == ny - 1", "0", "y + 1")),))))


def columns() -> tuple:
    """xm, xp: the columns x - 1, x + 1 (periodic)."""
    return (Let("xm", "int", Sel("x == 0", "nx - 1", "x - 1")), Let("xp", "int", Sel("x == nx - 1", "0", "x + 1")))


def fluid(code, test: str = "==") -> Fmt:
    """The cell whose flag is ``code`` (an expression) is (``==``) or is not (``!=``) a fluid cell."""
    return Fmt(f"({{}} & 0x7f) {test} {{}}", (code, FLUID))


def _link(layout, rules, i: int) -> Block:
    """h[i] of a boundary cell: the pull from a fluid source x - c_i, else the rule of the source's flag (tested in
    the order of ``rules``; the last one is what remains) applied to ``hop`` = f*_opp(i)(x)."""
    chain: tuple = ()
    for r, rule in reversed(list(enumerate(rules))):
        apply = (Piece(rule.piece, i, layout.own_velocity, f"{rule.name[0]}{i}_"), Set(f"h[{i}]", "h"))
        chain = apply if r == len(rules) - 1 else (If(f"fs == {rule.flag}", apply, chain),)
    return Block((Let("s", "index", SOURCE[i]), Let("fs", "int", Fmt("{} & 0x7f", (At("flags", "s"),))),
                  If(f"fs == {FLUID}", (Set(f"h[{i}]", Pop("A", layout.pull(i))),),
                     (Let("hop", "real", Pop("A", layout.hop(i))), *chain))))


def pull_cell(layout, rules) -> Function:
    """``pull_cell_<tag>``: h[0..8] = the populations arriving at fluid cell x of a step of ``layout``: pull streaming,
    and on links from non-fluid cells their boundary rules (``rules.link_rules``: the registered rules' pieces); a cell without the boundary
    bit pulls its nine populations unconditionally."""
    table = layout.own_velocity == "table"
    args = ((("A", "pop_in"), ("flags", "flags"), ("vel_cells", "index_in"), ("vel_u", "real_in"), ("n_vel", "int"))
            + ((("out_cells", "index_in"), ("own_u", "real_in"), ("n_out", "int")) if table else ())
            + (("N", "index_value"), ("nx", "int"), ("x", "int"), ("row", "index_value"), ("rowm", "index_value"),
               ("rowp", "index_value"), ("code", "int")))
    interior = tuple(Set(f"h[{i}]", Pop("A", layout.interior(i))) for i in range(Q))
    boundary = (Var("have_own", "bool", Named("false")), Var("own_ux", "real", Named("zero")),
                Var("own_uy", "real", Named("zero")), Set("h[0]", Pop("A", "cell")),
                *(_link(layout, rules, i) for i in range(1, Q)))
    body = (Let("cell", "index", "row + x"), *columns(),
            If(Fmt("(code & {}) == 0", (BOUNDARY_BIT,)), interior, boundary))
    return Function(f"pull_cell_{layout.tag}", f"Pull streaming + boundary rules for one fluid cell, {layout.name} "
                    "step: h[0..8] = populations arriving at (x, y).", args, body, (), out_array=("h", Q))


def moments_kernel(state) -> Kernel:
    """drho, ux, uy (compute dtype) of the stored state in ``state`` layout (``kernel_plan.EVEN`` / ``ODD``);
    non-fluid cells: 0. The cell's coordinates are only computed where the layout's positions use them."""
    zero = Named("zero")
    body = (grid_size(), Let("cell", "index", Named("thread")), If("cell >= N", (Return(),), compact=True),
            If(fluid(At("flags", "cell"), "!="),
               (Set("out[cell]", zero), Set("out[N + cell]", zero), Set("out[2 * N + cell]", zero), Return())))
    if state.shifted:
        body += (*cell_coords(), *rows(), *columns())
    body += tuple(Let(f"h{i}", "real", Pop("A", state.own(i))) for i in range(Q))
    body += (Physics("moments", (H_NAMES,), ("drho", "ux", "uy")),
             Set("out[cell]", "drho"), Set("out[N + cell]", "ux"), Set("out[2 * N + cell]", "uy"))
    return Kernel(state.moments_kernel, f"drho, ux, uy of the {state.name} layout; non-fluid cells: 0, 0, 0",
                  (("A", "pop_in"), ("flags", "flags"), ("out", "real_out"), ("nx", "int"), ("ny", "int")), body)


def step_args(layout, layer: bool, own_u: str = "real_io") -> tuple:
    """The arguments of a step kernel of ``layout`` (the device pull function's, with ``own_u`` read only)."""
    table = layout.own_velocity == "table"
    return ((("A", "pop" if layout.in_place else "pop_in"),) + (() if layout.in_place else ((layout.dst, "pop"),))
            + (("flags", "flags"), ("vel_cells", "index_in"), ("vel_u", "real_in"), ("n_vel", "int"))
            + ((("out_cells", "index_in"), ("own_u", own_u), ("n_out", "int")) if table else ())
            + (("nx", "int"), ("ny", "int"), ("omega_plus", "real_value"), ("omega_minus", "real_value"))
            + (tuple((a, "real_value") for a in LAYER_ARGS) if layer else ()))


def _outlet_update(layout) -> If:
    """In place: an outlet cell rewrites its velocity in ``own_u`` from the populations it just stored."""
    stores = [layout.store(j) for j in range(Q)]
    return If(Fmt("code[k] & {}", (BOUNDARY_BIT,)), (
        Let("t", "int", "outlet_index(out_cells, n_out, cell)"),
        If("t >= 0", (*(Let(f"h{j}", "real", Pop("A", stores[j])) for j in range(Q)),
                      Physics("moments", (H_NAMES,), ("drho", "ux", "uy")),
                      Set("own_u[t]", "ux"), Set("own_u[n_out + t]", "uy")),
           note="the outlet rule's velocity at t + 1: moments of the populations just stored")))


def _store_in_place(layout) -> Block:
    """The in-place step's collision and stores of one cell (positions from the layout it writes)."""
    return Block((Let("cell", "index", "row + x"), *(columns() if layout.writes.shifted else ()),
                  Decl("real", "o", (Q,)), Collide("h[k]", "o", "x"), Seed("rs", "h[k][0]", "cell"),
                  *(StoreStep("A", layout.store(j), f"o[{j}]", j) for j in range(Q)), _outlet_update(layout)))


def step_kernel(layout, cpt: int, block_x: int, collision: str, layer: bool) -> Kernel:
    """The fused step kernel of one step layout: each thread updates ``cpt`` cells of one row, ``block_x``
    apart (every load instruction of a warp stays contiguous); all their loads are issued before the first
    collision, to keep enough bytes in flight for 16-bit storage. In place, the outlet cells also rewrite
    their velocity in ``own_u`` from the populations they just stored (the outlet rule's velocity at t + 1)."""
    table = layout.own_velocity == "table"
    pull_args = ("A", "flags", "vel_cells", "vel_u", "n_vel", *(("out_cells", "own_u", "n_out") if table else ()),
                 "N", "nx", f"x0 + k * {block_x}", "row", "rowm", "rowp", "code[k]")
    store = _store_in_place(layout) if layout.in_place else CollideStore("h[k]", layout.dst, "row + x", "x")
    body = (Let("y", "int", Named("block_y")),
            Let("x0", "int", Fmt("{} * ({} * {}) + {}", (Named("block_x"), block_x, cpt, Named("thread_x")))),
            grid_size(), *rows(),
            Decl("int", "code", (cpt,)),
            Unrolled("k", cpt, (Let("x", "int", f"x0 + k * {block_x}"),
                                Set("code[k]", Sel("x < nx", Cast("int", At("flags", "row + x")), str(WALL))))),
            Decl("real", "h", (cpt, Q), Named("zero9")),
            Unrolled("k", cpt, (If(fluid("code[k]"), (Call(f"pull_cell_{layout.tag}", pull_args, "h[k]"),),
                                   compact=True),)),
            Unrolled("k", cpt, (Let("x", "int", f"x0 + k * {block_x}"), If(fluid("code[k]"), (store,)))))
    doc = (f"One fused LBM step, {layout.name} (pull + boundaries + {collision.upper()} + store); see the module "
           "docstring.\nBytes per cell per step: 18 * sizeof(store_t) + 1 (flag).")
    return Kernel(layout.kernel, doc, step_args(layout, layer), body, bounds=True)


def own_velocity() -> Function:
    """The velocity of a cell at time t from its own stored populations (the outlet rule in a two-buffer step)."""
    names = tuple(f"o{i}" for i in range(Q))
    body = (*(Let(names[i], "real", Pop("A", EVEN.own(i))) for i in range(Q)),
            Physics("moments", (names,), ("drho", "ux", "uy"), tag="om"))
    return Function("own_velocity", "velocity of this cell at time t: moments of its own stored populations (outlet "
                    "rule, two-buffer step)", (("A", "pop_in"), ("N", "index_value"), ("cell", "index_value")), body,
                    (("ux", "real"), ("uy", "real")), inline=False)
