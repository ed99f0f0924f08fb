"""One plan per LBM step kernel; two emitters write it out (``kernels_cupy``: CUDA C, ``kernels_numba``:
Python for ``numba.cuda.jit``).

Every step kernel does the same thing per fluid cell x: for each direction i pull f*_i(x - c_i), or,
where x - c_i is a boundary cell, apply that cell's rule (``hpcsolve.lbm.boundaries``) to f*_opp(i)(x);
collide; store the nine f*_j(x). Kernels differ only in *where* those populations live. That is the
layout accessor here (the idea of lbmpy's streaming accessors):

- a :class:`StateLayout` says where f*_k(y) is stored: slot k of y (:data:`EVEN`, the two-buffer layout),
  or slot opp(k) of y + c_k (:data:`ODD`, in-place streaming after an odd number of AA steps,
  hpcsolve/lbm/steppers/inplace.py);
- a :class:`StepLayout` reads one state layout and writes one: :data:`TWO_BUFFER` (EVEN -> EVEN, A -> B),
  :data:`AA_EVEN` (EVEN -> ODD, in A) and :data:`AA_ODD` (ODD -> EVEN, in A).

From those two facts :meth:`StepLayout.pull` (f*_i(x - c_i) of a fluid neighbour), :meth:`StepLayout.hop`
(the boundary rule's f*_opp(i)(x)) and :meth:`StepLayout.store` (f*_j(x)) follow, as position expressions
``slot * N + cell`` that are valid C and Python alike, in the locals every step kernel defines:

    N = nx * ny, row / rowm / rowp (rows y, y - 1, y + 1 times nx, periodic), x / xm / xp (columns),
    cell = row + x, s = the source cell x - c_i of a boundary link.

The emitters take the positions, the boundary rules' kernel pieces (:class:`PieceOp` sequences) and the
physics (``physics.py``), and write their language; none of them spells a position or a rule itself.
Whole kernel bodies are written in the code generator's nodes (``hpcsolve.core.codegen.nodes``: :class:`Let`,
:class:`If`, :class:`Unrolled`, ...) and the LBM's own statements at the end of this module (:class:`Pop`,
:class:`Collide`, ...; the step and moments kernels in ``step_plan.py``), and printed by each emitter's printer
(``print_cuda.CPrinter`` / ``print_numba.PythonPrinter``, one method per node type).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpcsolve.core.codegen.nodes import (  # noqa: F401 (re-exported: the kernel descriptions write them)
    And, At, Block, Call, Cast, Conv, Decl, Fmt, Function, IDiv, If, Kernel, Let, Named, Not, Return, Sel, Set,
    Unrolled, Var, While)
from hpcsolve.lbm import lattice

Q, CX, CY, OPP = lattice.Q, lattice.CX, lattice.CY, lattice.OPPOSITE

_ROW = {0: "row", 1: "rowp", -1: "rowm"}     # the row of y + c_y
_COL = {0: "x", 1: "xp", -1: "xm"}           # the column of x + c_x


def cell_at(cx: int, cy: int) -> str:
    """The cell x + (cx, cy) (each -1, 0 or 1) in the kernels' locals (periodic wrap)."""
    return f"{_ROW[cy]} + {_COL[cx]}"


#: x - c_i (where f_i is pulled from) and x + c_i, per direction
SOURCE = tuple(cell_at(-CX[i], -CY[i]) for i in range(Q))
DEST = tuple(cell_at(CX[i], CY[i]) for i in range(Q))


@dataclass(frozen=True)
class StateLayout:
    """Where the stored f*_k(y) lives: slot k of cell y, or (``shifted``) slot opp(k) of cell y + c_k."""

    name: str
    shifted: bool

    def position(self, k: int, at: int, i: int | str, s: str = "s") -> str:
        """Position of f*_k(y) with y = x + at * c_i, k = i (``k = 1``) or opp(i) (``k = -1``), for the link
        direction ``i`` (an int: unrolled, literals; ``"i"``: the generic link of a device function whose
        locals ``i`` / ``opp`` hold the directions; then ``at`` is never +1 for a shifted layout). ``s`` names
        the cell x - c_i."""
        slot_sign, cell = (-k, at + k) if self.shifted else (k, at)
        if isinstance(i, str):
            slot = "i" if slot_sign == 1 else "opp"
        else:
            slot = str(i if slot_sign == 1 else OPP[i])
        where = {-1: s, 0: "cell"}.get(cell)
        if where is None:
            if isinstance(i, str):
                raise ValueError("x + c_i of a generic link is not a kernel local")
            where = DEST[i]
        return f"{slot} * N + {where}"

    def own(self, i: int) -> str:
        """Position of this cell's own f*_i(x) (moments of the stored state)."""
        return self.position(1, 0, i)

    @property
    def moments_kernel(self) -> str:
        """The name of the kernel that takes drho, ux, uy of a state in this layout."""
        return "lbm_moments_odd" if self.shifted else "lbm_moments"


EVEN = StateLayout("even", False)
ODD = StateLayout("odd", True)


@dataclass(frozen=True)
class StepLayout:
    """One step kernel's accessor: it reads the state in ``reads`` from array ``src`` and writes it in
    ``writes`` to ``dst`` (the same array in place). ``own_velocity``: where the outlet rule finds the
    cell's velocity at time t: ``"stored"`` (moments of its stored populations, intact during a two-buffer
    step) or ``"table"`` (in place, neighbours overwrite them: the outlet cells' table ``own_u``)."""

    name: str
    kernel: str
    reads: StateLayout
    writes: StateLayout
    src: str
    dst: str
    own_velocity: str

    @property
    def in_place(self) -> bool:
        return self.src == self.dst

    @property
    def tag(self) -> str:
        """The suffix of this layout's device functions (``pull_cell_<tag>``)."""
        return self.kernel.removeprefix("lbm_")

    def pull(self, i, s: str = "s") -> str:
        """Position of f*_i(x - c_i) (the neighbour is fluid)."""
        return self.reads.position(1, -1, i, s)

    def hop(self, i, s: str = "s") -> str:
        """Position of f*_opp(i)(x), the population a boundary rule on link i starts from."""
        return self.reads.position(-1, 0, i, s)

    def interior(self, i: int) -> str:
        """:meth:`pull` of a cell whose neighbours are all fluid (x - c_i spelled out, no ``s``)."""
        return self.pull(i, SOURCE[i])

    def store(self, j: int) -> str:
        """Position the post-collision f*_j(x) is written to."""
        return self.writes.position(1, 0, j)


TWO_BUFFER = StepLayout("two-buffer", "lbm_step", EVEN, EVEN, "A", "B", "stored")
AA_EVEN = StepLayout("aa-even", "lbm_step_aa_even", EVEN, ODD, "A", "A", "table")
AA_ODD = StepLayout("aa-odd", "lbm_step_aa_odd", ODD, EVEN, "A", "A", "table")


def step_layouts(in_place: bool) -> tuple[StepLayout, ...]:
    """The step kernels a stepper alternates: the two-buffer step, or the AA pair (even, odd)."""
    return (AA_EVEN, AA_ODD) if in_place else (TWO_BUFFER,)


# ------------------------------------------------------------------------------------------------
# kernel pieces: what a boundary rule (or a link-list kernel) does, in neither language

@dataclass(frozen=True)
class PieceOp:
    """One statement of a kernel piece: ``out`` (the names it binds), ``args`` and, where it says so, ``fn``. Each
    statement is a class of its own, printed by the method of its type; :func:`Op` builds one from its name.

    The rule's value for the link is the name ``h``."""

    fn: str = ""
    out: tuple = ()
    args: tuple = ()
    #: the statement's name in :func:`Op`
    kind: ClassVar[str] = ""


@dataclass(frozen=True)
class Lookup(PieceOp):
    """``out = (a, b)``: the boundary-velocity table entry of cell ``args[0]`` (``boundaries.velocity.velocity_table``:
    a velocity cell's u_w, an outlet cell's reference outflow)."""

    kind: ClassVar[str] = "lookup"


@dataclass(frozen=True)
class OwnVelocity(PieceOp):
    """``out = (ux, uy)``: the cell's velocity at time t, as the step layout keeps it
    (:attr:`StepLayout.own_velocity`)."""

    kind: ClassVar[str] = "own_velocity"


@dataclass(frozen=True)
class PhysicsOp(PieceOp):
    """``out = physics.<fn>(*args)``; an argument is a name of the piece, a kernel local, or one of the link
    constants ``w_i``, ``cx_i``, ``cy_i`` and ``ZERO``."""

    kind: ClassVar[str] = "physics"


@dataclass(frozen=True)
class Load(PieceOp):
    """List kernels (one thread per entry k of a link list; :class:`ListKernel`): ``out = (v,)``, the decoded stored
    population ``array[index]`` of ``args = (array, index)``."""

    kind: ClassVar[str] = "load"


@dataclass(frozen=True)
class Widen(PieceOp):
    """``out = (v,)``: ``args[0]`` as float64."""

    kind: ClassVar[str] = "widen"


@dataclass(frozen=True)
class Expr(PieceOp):
    """``out = (v,)``: ``args[0]``, arithmetic text valid in C and Python, of type ``fn`` (``"double"`` or
    ``"real"``)."""

    kind: ClassVar[str] = "expr"


@dataclass(frozen=True)
class Store(PieceOp):
    """``args = (array, index, v)``: array[index] = the encoded v."""

    kind: ClassVar[str] = "store"


@dataclass(frozen=True)
class Copy(PieceOp):
    """``args = (dst, dst_index, src, src_index)``: a stored value moved as it is."""

    kind: ClassVar[str] = "copy"


@dataclass(frozen=True)
class AtomicAdd(PieceOp):
    """``args = (array, index, v)``: array[index] += v, atomically (float64)."""

    kind: ClassVar[str] = "atomic_add"


#: the statements of kernel pieces by name
OPS = {cls.kind: cls for cls in (Lookup, OwnVelocity, PhysicsOp, Load, Widen, Expr, Store, Copy, AtomicAdd)}


def Op(kind: str, fn: str = "", out: tuple = (), args: tuple = ()) -> PieceOp:  # noqa: N802 (a node constructor)
    """The kernel-piece statement named ``kind`` (a key of :data:`OPS`)."""
    if kind not in OPS:
        raise ValueError(f"unknown kernel op {kind!r}; known: {', '.join(OPS)}")
    return OPS[kind](fn, out, args)


@dataclass(frozen=True)
class LinkRule:
    """A boundary rule applied on link i of a fluid cell x whose neighbour x - c_i has flag ``flag``: its kernel
    ``piece`` computes f_i(x, t + 1) (the name ``h``) from ``hop`` = f*_opp(i)(x, t) (:meth:`StepLayout.hop`).
    Each rule lives in its module of ``hpcsolve.lbm.boundaries``."""

    name: str
    flag: int
    piece: tuple[Op, ...]


def link_constants(P, i) -> dict:
    """The values of the link constants of direction ``i`` in the physics ``P`` (compute dtype)."""
    return {"w_i": P.W[i], "cx_i": P.CX[i], "cy_i": P.CY[i], "ZERO": P.ZERO}


@dataclass(frozen=True)
class ListKernel:
    """A kernel over a list of n entries (one thread per entry k): arguments ``(name, kind)`` with kind
    ``pop`` / ``pop_in`` (stored populations, written / read only), ``index`` (int64), ``real`` (compute
    dtype), ``f64`` / ``f64_out`` (float64, read / accumulated), then ``n``; the ``body`` is :class:`PieceOp`
    statements. The Bouzidi pre-pass (``bouzidi.GATHER`` / ``SCATTER``) and the momentum exchange
    (:data:`FORCE_KERNEL`) are such kernels, emitted by both backends."""

    name: str
    doc: str
    args: tuple
    body: tuple


#: momentum exchange on the device: out += c_k (m_k h[pos_k] + c_k) over the terms of ``boundaries.force.force_links``
FORCE_KERNEL = ListKernel(
    "lbm_force", "momentum exchange: out[0:2] += (cx, cy) * (m * h[pos] + c), float64 (gpu_common.force_links)",
    (("A", "pop_in"), ("pos", "index"), ("cx", "f64"), ("cy", "f64"), ("m", "f64"), ("c", "f64"), ("out", "f64_out")),
    (Load(out=("h",), args=("A", "pos[k]")), Widen(out=("hd",), args=("h",)),
     Expr("double", out=("s",), args=("m[k] * hd + c[k]",)),
     AtomicAdd(args=("out", "0", "cx[k] * s")), AtomicAdd(args=("out", "1", "cy[k] * s"))))


# ------------------------------------------------------------------------------------------------
# the 16-bit pair kernel (lbm_step_pair): two cells (x, x + 1), x even, per thread, one 32-bit word per
# population and pair

@dataclass(frozen=True)
class PairPull:
    """Where a pair of cells (x, x + 1), x even, finds f*_i(x - c_i) and f*_i(x + 1 - c_i) among the 32-bit
    words of the two-buffer state (the even cell in the low half): in the pair row ``row`` of y - c_y
    (``prow`` / ``prowm`` / ``prowp``, rows halved), the pair's own word and, for c_x = +-1, the word of the
    neighbouring pair ``neighbour`` (-1: the previous pair, at ``pm``, its high half is x - 1; +1: the next,
    at ``pp``, its low half is x + 2). ``a`` / ``b``: (word, half) of cell x / x + 1, word ``"own"`` or
    ``"nb"``, half ``"lo"`` or ``"hi"``. The emitters pass the neighbour's half between threads (warp
    shuffles or shared memory); the thread at a warp / block edge or the periodic wrap loads that word."""

    row: str
    neighbour: int
    a: tuple[str, str]
    b: tuple[str, str]


def _pair_pull(i: int) -> PairPull:
    row = {0: "prow", 1: "prowm", -1: "prowp"}[CY[i]]        # the pair row of y - c_y
    if CX[i] == 0:            # sources (x, x + 1): both halves of the own word
        return PairPull(row, 0, ("own", "lo"), ("own", "hi"))
    if CX[i] == 1:            # sources (x - 1, x): the previous pair's high half, our low half
        return PairPull(row, -1, ("nb", "hi"), ("own", "lo"))
    return PairPull(row, 1, ("own", "hi"), ("nb", "lo"))  # sources (x + 1, x + 2): our high half, the next's low


#: per direction i, where the pair kernel pulls f*_i from (:class:`PairPull`)
PAIR_PULLS = tuple(_pair_pull(i) for i in range(Q))


# ------------------------------------------------------------------------------------------------
# kernel bodies: the code generator's nodes (hpcsolve/core/codegen/nodes.py: declarations, guards, loops, device
# arrays, re-exported above for the kernel descriptions) and the LBM's own statements below, printed by the LBM
# printers (``print_cuda.CPrinter``, ``print_numba.PythonPrinter``: one method per node type).


@dataclass(frozen=True)
class Pop:
    """The decoded stored population ``array`` at position ``pos`` (compute dtype)."""

    array: str
    pos: object


@dataclass(frozen=True)
class Physics:
    """``out = physics.<fn>(*args)`` (an argument tuple: the populations), traced (C) or called (Python); ``tag``
    names the trace's temporaries (default: the function's initial)."""

    fn: str
    args: tuple
    out: tuple
    tag: str = ""


@dataclass(frozen=True)
class Collide:
    """``out`` = the collision of populations ``h`` of the cell (``x``, ``y``) (the layer coefficient's cell)."""

    h: str
    out: str
    x: str
    y: str = "y"


@dataclass(frozen=True)
class StoreStep:
    """The step's store of direction ``i``'s post-collision value into ``array`` at ``pos`` (stochastic rounding
    with the seed ``seed`` where the policy rounds so)."""

    array: str
    pos: str
    value: str
    i: int
    seed: str = "rs"


@dataclass(frozen=True)
class Seed:
    """``name`` = the cell's random seed from its pre-collision rest population ``h0`` and its index ``cell``;
    nothing where the stores round to nearest."""

    name: str
    h0: str
    cell: str


@dataclass(frozen=True)
class CollideStore:
    """Collide the populations ``h`` of the cell (``x``, ``y``) and store the nine results into ``array`` (the
    even layout) at ``cell``."""

    h: str
    array: str
    cell: str
    x: str
    y: str = "y"


@dataclass(frozen=True)
class Piece:
    """A boundary rule's kernel piece (``PieceOp`` s, ``LinkRule.piece``) on the link of direction ``i``: its link
    constants ``w_i`` / ``cx_i`` / ``cy_i`` are direction i's, its value is the name ``h``; ``own``: where the cell's
    velocity at time t is (:attr:`StepLayout.own_velocity`), fetched once per cell into ``own_ux`` / ``own_uy``
    (flag ``have_own``); ``tag`` keeps the piece's temporaries apart from the other links'."""

    ops: tuple
    i: int
    own: str
    tag: str


@dataclass(frozen=True)
class PairExchange:
    """The pair kernel's neighbouring words: for each direction i of :data:`PAIR_PULLS` with a neighbour, ``n<i>`` =
    the word ``u<i>`` of the neighbouring pair (-1: the previous, +1: the next), passed between threads (warp
    shuffles, or shared memory and one barrier); the thread at the edge of the warp / block, and the pair at the
    periodic wrap, loads it itself from ``words`` at the pair ``pm`` / ``pp``. Every thread takes part."""

    words: str
    block_x: int


@dataclass(frozen=True)
class PairHalves:
    """``a`` / ``b`` = the populations f*_i(x - c_i) of the pair's cells x / x + 1, widened (compute dtype) from the
    halves of the words ``u<i>`` / ``n<i>`` (:data:`PAIR_PULLS`), unscaled by the policy."""

    a: str
    b: str


@dataclass(frozen=True)
class PairFlags:
    """``a`` / ``b`` = the flags of the pair's cells x / x + 1 (C: one 2-byte load)."""

    a: str
    b: str


@dataclass(frozen=True)
class PairStores:
    """Store the post-collision populations ``a`` (cell x, low halves) and ``b`` (x + 1) as packed words into
    ``words`` at pair row ``prow``; with stochastic rounding, the seeds from the cells' rest populations ``ha0`` /
    ``hb0`` (their pre-collision f*_0)."""

    words: str
    a: str
    b: str
    ha0: str
    hb0: str


#: the LBM's own node types (beside the code generator's), each printed by a method of both LBM printers
NODES = (Pop, Physics, Collide, StoreStep, Seed, CollideStore, Piece, PairExchange, PairHalves, PairFlags, PairStores)
