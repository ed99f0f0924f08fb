"""The 16-bit pair kernel ``lbm_step_pair`` (two-buffer step, 16-bit storage, nx even), described once in the plan's
vocabulary (``kernel_plan``) and printed by both emitters (``print_cuda.CPrinter``, ``print_numba.PythonPrinter``).

Each thread updates the two adjacent cells (x, x + 1), x even. Per population it loads one aligned 32-bit word of the
source row, (g[x], g[x + 1]), instead of two 16-bit values, and stores one packed word (rounded to nearest as
``store_pop``, or stochastically with the cells' seeds). A population pulled from x - 1 (c_x = +1) or x + 2 (c_x = -1)
is the other half of the neighbouring thread's word (``kernel_plan.PAIR_PULLS``): the raw word is passed between
threads (``kernel_plan.PairExchange``), the thread at an edge (and the pair at the periodic wrap, pair index modulo
nx / 2) loads it itself, and only then is each half widened, once. So DRAM sees each 4-byte word once. Every thread
executes the loads and the exchange (inactive ones on a clamped pair); pairs with a boundary cell (flag bit 7, or a
non-fluid cell) then take the per-cell path (``pull_cell_step`` + the collision and stores) as ``lbm_step`` does.
Bytes per cell per step: unchanged (18 * 2 + 1 = 37).
"""

from __future__ import annotations

from hpcsolve.lbm.kernels.layer_code import ARGS as LAYER_ARGS
from hpcsolve.lbm.flags import FLUID
from hpcsolve.lbm.kernels.kernel_plan import (PAIR_PULLS, Q, And, At, Call, Cast, CollideStore, Collide, Decl, Fmt,
                                              If, Kernel, Let, Named, Not, PairExchange, PairFlags, PairHalves,
                                              PairStores, Return, Sel)
from hpcsolve.lbm.kernels.step_plan import fluid


def pair_locals() -> tuple:
    """The pair kernel's locals after its pair index ``px``: the row y and even cell x, the grid size and the pair
    grid's, the (pair) rows y, y - 1, y + 1 (periodic) and the neighbouring pairs (periodic)."""
    return (Let("y", "int", Named("block_y")), Let("x", "int", "2 * px"),
            Let("N", "index", Fmt("{} * ny", (Cast("index", "nx"),))), Let("NP", "index", "N >> 1"),
            Let("row", "index", Fmt("{} * nx", (Cast("index", "y"),))),
            Let("rowm", "index", Fmt("{} * nx", (Cast("index", Sel("y == 0", "ny - 1", "y - 1")),))),
            Let("rowp", "index", Fmt("{} * nx", (Cast("index", Sel("y == ny - 1", "0", "y + 1")),))),
            Let("prow", "index", "row >> 1"), Let("prowm", "index", "rowm >> 1"), Let("prowp", "index", "rowp >> 1"),
            Let("pm", "int", Sel("px == 0", "npairs - 1", "px - 1")),
            Let("pp", "int", Sel("px == npairs - 1", "0", "px + 1")))


def _cell_path(k: int) -> If:
    """Cell x + k of a pair with a boundary or non-fluid cell: the per-cell pull, collision and stores."""
    pull_args = ("A", "flags", "vel_cells", "vel_u", "n_vel", "N", "nx", f"x + {k}", "row", "rowm", "rowp", f"c{k}")
    return If(fluid(f"c{k}"), (Decl("real", "h", (Q,)), Call("pull_cell_step", pull_args, "h"),
                               CollideStore("h", "B", f"row + x + {k}", f"x + {k}")))


def pair_kernel(block_x: int, layer: bool) -> Kernel:
    """``lbm_step_pair`` with ``block_x`` threads (pairs) per block; ``layer``: the absorbing layer's arguments."""
    words = tuple(Let(f"u{i}", "word", At("AW", f"{i} * NP + {PAIR_PULLS[i].row} + px")) for i in range(Q))
    body = (Let("npairs", "int", "nx >> 1"),
            Let("p_raw", "int", Fmt(f"{{}} * {block_x} + {{}}", (Named("block_x"), Named("thread_x")))),
            Let("active", "bool", "p_raw < npairs"),
            Let("px", "int", Sel("active", "p_raw", "npairs - 1")),      # inactive threads still join the exchange
            *pair_locals(), *words, PairExchange("AW", block_x),
            If(Not("active"), (Return(),), compact=True),
            PairFlags("c0", "c1"),
            If(And(f"c0 == {FLUID}", f"c1 == {FLUID}"),
               (PairHalves("ha", "hb"), Decl("real", "oa", (Q,)), Decl("real", "ob", (Q,)),
                Collide("ha", "oa", "x"), Collide("hb", "ob", "x + 1"),
                PairStores("BW", "oa", "ob", "ha[0]", "hb[0]")),
               (_cell_path(0), _cell_path(1))))
    args = ((("A", "pop_in"), ("B", "pop"), ("flags", "flags"), ("vel_cells", "index_in"), ("vel_u", "real_in"),
             ("n_vel", "int"), ("nx", "int"), ("ny", "int"), ("omega_plus", "real_value"),
             ("omega_minus", "real_value")) + (tuple((a, "real_value") for a in LAYER_ARGS) if layer else ()))
    doc = ("16-bit storage, nx even: two adjacent cells per thread, one 32-bit word per population loaded and stored\n"
           "(lbm/kernels/pair_plan.py). Bytes per cell per step as lbm_step: 18 * 2 + 1 = 37.")
    return Kernel("lbm_step_pair", doc, args, body, bounds=True,
                  views=(("AW", "A", "words_in"), ("BW", "B", "words")))
