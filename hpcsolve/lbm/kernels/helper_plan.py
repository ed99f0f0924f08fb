"""The device helpers of the step sources in the plan's statement vocabulary (``kernel_plan``): the hash-table lookups
of the boundary cells (``gpu_common.cell_table``) and the outlet rule's velocity table, printed by both emitters
(``print_cuda.CPrinter``, ``print_numba.PythonPrinter``), and the CUDA C collision helpers ``collide_values`` /
``collide_store`` (the Numba kernels call the physics' collision directly)."""

from __future__ import annotations

from hpcsolve.lbm import collision as collision_models
from hpcsolve.lbm.kernels.kernel_plan import (Q, And, Call, Conv, Decl, Fmt, Function, Let, Named, Physics,
                                              Return, Seed, Sel, Set, StoreStep, Unrolled, Var, While)


def table_home() -> Function:
    """The home slot of a cell in a hash table of ``size`` slots (``cell_table.table_home``)."""
    home = Fmt("(({} * {}) >> {}) & {}", (Conv("u64", "cell"), Named("hash_mult"), Named("shift32"),
                                          Conv("u64", "size - 1")))
    return Function("table_home", "home slot of a cell in a hash table of `size` slots (a power of two; "
                    "gpu_common.cell_table)", (("cell", "index_value"), ("size", "int")),
                    (Return(Conv("int", home)),), (), result="int")


def boundary_velocity() -> Function:
    """u_w of a VELOCITY cell ``s`` from the hash table ``vel_cells`` / ``vel_u`` (linear probing)."""
    body = (Var("k", "int", "table_home(s, n_vel)"),
            Var("ux", "real", "vel_u[k]"), Var("uy", "real", "vel_u[n_vel + k]"),
            While("vel_cells[k] != s", (Set("k", "(k + 1) & (n_vel - 1)"), Set("ux", "vel_u[k]"),
                                        Set("uy", "vel_u[n_vel + k]"))))
    doc = ("u_w of a VELOCITY cell s (boundary links only): its slot in the hash table vel_cells (n_vel slots,\n"
           "linear probing); the values of the home slot load with its key, so one round trip when it is there")
    return Function("boundary_velocity", doc,
                    (("vel_cells", "index"), ("vel_u", "real"), ("n_vel", "int"), ("s", "index_value")), body,
                    (("uwx", "real", "ux"), ("uwy", "real", "uy")))


def outlet_index() -> Function:
    """The slot of an outlet cell in the hash table ``out_cells`` (-1: not an outlet cell)."""
    body = (Var("k", "int", "table_home(cell, n_out)"), Var("key", "index", "out_cells[k]"),
            While(And("key != cell", "key != -1"), (Set("k", "(k + 1) & (n_out - 1)"), Set("key", "out_cells[k]"))),
            Return(Sel("key == cell", "k", "-1")))
    return Function("outlet_index", "the outlet cell's slot in the hash table out_cells (n_out slots; -1: not an "
                    "outlet cell)", (("out_cells", "index"), ("n_out", "int"), ("cell", "index_value")), body, (),
                    result="int")


def outlet_velocity() -> Function:
    """The velocity of an outlet cell at time t from the in-place table ``own_u`` (CUDA C; Numba inlines it)."""
    return Function("outlet_velocity", "velocity of an outlet cell at time t from the in-place table own_u (outlet "
                    "rule, in-place steps)",
                    (("out_cells", "index"), ("own_u", "real_plain"), ("n_out", "int"), ("cell", "index_value")),
                    (Let("k", "int", "outlet_index(out_cells, n_out, cell)"),),
                    (("ux", "real", "own_u[k]"), ("uy", "real", "own_u[n_out + k]")))


def _collision(collision: str, layer: bool) -> tuple[str, tuple]:
    """The physics function of the collision and its arguments after the populations (the model's kernel piece,
    ``collision.CollisionModel.kernel_call``)."""
    return collision_models.get(collision).kernel_call(layer)


def _collision_args(layer: bool) -> tuple:
    return (("omega_plus", "real_value"), ("omega_minus", "real_value")) + ((("layer", "real_value"),) if layer else ())


def collide_values(collision: str, layer: bool) -> Function:
    """The collision of one cell as a device function (CUDA C; Numba calls the physics function itself):
    ``out[0..8]`` from ``hh[0..8]``, traced."""
    fn, params = _collision(collision, layer)
    h = tuple(f"h{i}" for i in range(Q))
    outs = tuple(f"collided{i}" for i in range(Q))
    body = (*(Let(h[i], "real", f"hh[{i}]") for i in range(Q)), Physics(fn, (h, *params), outs, tag="c"),
            *(Set(f"out[{i}]", outs[i]) for i in range(Q)))
    return Function("collide_values", f"{collision_models.get(collision).label} collision of one cell: post-collision populations "
                    "out[0..8] from h[0..8].", (("hh", "real_plain"), ("out", "real_ptr")) + _collision_args(layer),
                    body, ())


def collide_store(collision: str, layer: bool, stochastic: bool) -> Function:
    """The collision of ``hh[0..8]`` and the stores of the nine results of one cell (even layout; CUDA C): a loop of
    ``store_pop``, or with stochastic rounding the cell's seed from its pre-collision rest population and one store
    per direction."""
    if stochastic:
        stores = (Seed("rs", "hh[0]", "cell"), *(StoreStep("B", f"{i} * N + cell", f"o[{i}]", i) for i in range(Q)))
    else:
        stores = (Unrolled("i", Q, (StoreStep("B", "i * N + cell", "o[i]", "i"),), compact=True),)
    body = (Decl("real", "o", (Q,)),
            Call("collide_values", ("hh", "o", "omega_plus", "omega_minus") + (("layer",) if layer else ())), *stores)
    return Function("collide_store", f"{collision_models.get(collision).label} collision of h[0..8] and the store of the 9 post-collision "
                    "populations of one cell.", (("hh", "real_plain"), ("B", "pop"), ("N", "index_value"),
                                                 ("cell", "index_value")) + _collision_args(layer), body, ())

