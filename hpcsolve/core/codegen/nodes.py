"""The node set of the generated kernels, in neither language (printed by :mod:`hpcsolve.core.codegen.c` and
:mod:`hpcsolve.core.codegen.numba` / :mod:`hpcsolve.core.codegen.llvm`, one method per node type).

Three kinds of expression meet here:

- **kernel expressions**: strings valid in C and Python (arithmetic, comparisons, ``a[i]`` of a local array) or the
  nodes :class:`Sel`, :class:`Cast`, :class:`Fmt`, :class:`And`, :class:`Not`, :class:`Conv`, :class:`At`,
  :class:`Named`, :class:`IDiv`, where the two languages differ; their types are the kernel types of the printers'
  type table (``index``, ``int``, ``real``, ...) or a type parameter (``T``), printed as it is; the LBM kernels
  write theirs so;
- **operator expressions** (:class:`BinOp`, :class:`Compare`, :class:`BoolOp`, :class:`Unary`, :class:`Cond`,
  :class:`Index`, :class:`Apply`, ...): each printer writes them with its language's precedence (C's, and
  ``ast.unparse``'s for Python), keeping written parentheses (:class:`Paren`) where C has them as an operand; what the
  reader of restricted Python (:mod:`hpcsolve.core.codegen.frontend`) gives, the FEM's fused operations;
- **typed scalar expressions** (:class:`Scalar`: 32- and 16-bit integer and float arithmetic, built with Python's
  operators; ``f32``, ``u32``, ``i32``, ``u16``, ``i16``): the bit recipes of storage formats (the FP16C codec). C
  arithmetic on same-typed operands (an ``int`` constant takes the other operand's type); ``>>`` of a signed type is
  arithmetic; :class:`IntCast` is a C cast between integer types.

Statements (:class:`Let`, :class:`Lets`, :class:`Var`, :class:`Update`, :class:`Set`, :class:`If`, :class:`While`,
:class:`Unrolled`, the loops :class:`GridLoop` / :class:`BlockLoop` / :class:`Range`, :class:`Return`, ...) take any
kind. Containers: :class:`Kernel`, :class:`Function` (kernel
bodies) and :class:`Fn` (a scalar device function, or a primitive with its own C body and LLVM emitter).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: the scalar types and their widths
BITS = {"f32": 32, "u32": 32, "i32": 32, "u16": 16, "i16": 16}
SIGNED = frozenset({"i32", "i16"})


# ------------------------------------------------------------------------------------------------
# typed scalar expressions

class Scalar:
    """A typed scalar expression (``ty``); Python's operators build :class:`Bin` nodes."""

    __slots__ = ()
    ty: str

    def _bin(self, sym: str, other, ty: str | None = None, swap: bool = False) -> "Bin":
        other = other if isinstance(other, Scalar) else const(other, self.ty, str(other) if sym in ("<<", ">>")
                                                              else None)
        a, b = (other, self) if swap else (self, other)
        return Bin(sym, a, b, ty or a.ty)

    def __add__(self, o): return self._bin("+", o)
    def __sub__(self, o): return self._bin("-", o)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, swap=True)
    def __and__(self, o): return self._bin("&", o)
    def __or__(self, o): return self._bin("|", o)
    def __xor__(self, o): return self._bin("^", o)
    def __lshift__(self, o): return self._bin("<<", o)
    def __rshift__(self, o): return self._bin(">>", o)
    def ge(self, o): return self._bin(">=", o, "bool")
    def lt(self, o): return self._bin("<", o, "bool")
    def eq(self, o): return self._bin("==", o, "bool")


@dataclass(frozen=True, eq=False)
class Const(Scalar):
    """A constant ``value`` of type ``ty``; ``text``: its C spelling."""

    value: object
    ty: str
    text: str


@dataclass(frozen=True, eq=False)
class Ref(Scalar):
    """The scalar variable ``name`` of type ``ty``."""

    name: str
    ty: str


@dataclass(frozen=True, eq=False)
class Bin(Scalar):
    """``a sym b`` (``+ - * & | ^ << >>`` of type ``ty``, or a comparison ``< >= ==`` of type ``bool``)."""

    sym: str
    a: Scalar
    b: Scalar
    ty: str


@dataclass(frozen=True, eq=False)
class IntCast(Scalar):
    """``x`` as the integer type ``ty`` (C cast: sign or zero extension, truncation)."""

    ty: str
    x: Scalar


@dataclass(frozen=True, eq=False)
class AsUint(Scalar):
    """The bits of the float ``x`` as ``u32``."""

    x: Scalar
    ty = "u32"


@dataclass(frozen=True, eq=False)
class AsFloat(Scalar):
    """The ``u32`` ``x`` read as float bits."""

    x: Scalar
    ty = "f32"


@dataclass(frozen=True, eq=False)
class Fabs(Scalar):
    """``|x|`` of a float."""

    x: Scalar
    ty = "f32"


@dataclass(frozen=True, eq=False)
class Umin(Scalar):
    """The unsigned minimum of ``a`` and ``b``."""

    a: Scalar
    b: Scalar
    ty = "u32"


@dataclass(frozen=True, eq=False)
class Select(Scalar):
    """``a`` where ``cond`` holds, else ``b`` (typed; C ``c ? a : b``, LLVM ``select``)."""

    cond: Scalar
    a: Scalar
    b: Scalar

    @property
    def ty(self):
        return self.a.ty


@dataclass(frozen=True, eq=False)
class FnCall(Scalar):
    """``fn(*args)`` of a scalar device function :class:`Fn`."""

    fn: "Fn"
    args: tuple

    @property
    def ty(self):
        return self.fn.ret


def const(value, ty: str, text: str | None = None) -> Const:
    """A constant; ``text`` its C spelling (default: ``0x..u`` / ``..u`` for unsigned, decimal for signed)."""
    if text is None:
        if ty in SIGNED:
            text = str(value)
        elif ty == "f32":
            text = repr(float(value)) + "f"
        else:
            text = f"{value}u" if value < 10 else f"0x{value:X}u"
    return Const(value, ty, text)


# ------------------------------------------------------------------------------------------------
# kernel expressions (beside strings valid in C and Python)

@dataclass(frozen=True)
class Sel:
    """``a`` where ``cond`` holds, else ``b`` (C ``?:``, Python ``a if cond else b``)."""

    cond: object
    a: object
    b: object


@dataclass(frozen=True)
class Cast:
    """``value`` converted to the kernel type ``type`` (C: a cast; Python: the value, its type follows)."""

    type: str
    value: object


@dataclass(frozen=True)
class Fmt:
    """``text`` with its ``{}`` holes filled by the printed ``args``."""

    text: str
    args: tuple = ()


@dataclass(frozen=True)
class And:
    """``a`` and ``b`` (both conditions; C ``&&``, Python ``and``)."""

    a: object
    b: object


@dataclass(frozen=True)
class Not:
    """``a`` does not hold (C ``!``, Python ``not``)."""

    a: object


@dataclass(frozen=True)
class Conv:
    """``value`` converted to the integer type ``type`` (``int``, ``u64``) in both languages (C: a cast; Python: the
    conversion function of that type)."""

    type: str
    value: object


@dataclass(frozen=True)
class At:
    """A raw element ``array[index]`` of a device array (Python: through ``load_at``, no wraparound)."""

    array: str
    index: object


@dataclass(frozen=True)
class Named:
    """A value every language spells its own way (the printer's ``NAMED`` table): ``zero``, ``block_x`` /
    ``block_y`` / ``thread_x`` (CUDA indices), ``thread`` (the global 1D thread index), ..."""

    name: str


@dataclass(frozen=True)
class IDiv:
    """Integer division ``a / b`` of non-negative integers."""

    a: object
    b: object


# ------------------------------------------------------------------------------------------------
# operator expressions: each language prints them with its own precedence (parentheses only where it needs them)

@dataclass(frozen=True)
class BinOp:
    """``a sym b``: arithmetic ``+ - * / %``, ``//`` (integer division; C ``/``), shifts and bitwise ``>> << & | ^``."""

    sym: str
    a: object
    b: object


@dataclass(frozen=True)
class Compare:
    """``a sym b`` with ``sym`` one of ``< <= > >= == !=``."""

    sym: str
    a: object
    b: object


@dataclass(frozen=True)
class BoolOp:
    """``values`` joined by ``sym``: ``and`` (C ``&&``) or ``or`` (C ``||``)."""

    sym: str
    values: tuple


@dataclass(frozen=True)
class Unary:
    """``sym a`` with ``sym`` one of ``-``, ``+``, ``not`` (C ``!``)."""

    sym: str
    a: object


@dataclass(frozen=True)
class Cond:
    """``a`` where ``test`` holds, else ``b``, as an operator expression (C ``test ? a : b``, Python
    ``a if test else b``; :class:`Sel` is the same choice written around a condition given as text)."""

    test: object
    a: object
    b: object


@dataclass(frozen=True)
class Paren:
    """``value`` written in parentheses: C keeps them where ``value`` is an operand (the arithmetic order is the one
    written), Python's follow its precedence."""

    value: object


@dataclass(frozen=True)
class Index:
    """``array[index]`` of a local or device array (both expressions)."""

    array: object
    index: object


@dataclass(frozen=True)
class ReadOnly:
    """``array[index]`` loaded through the read-only cache (C ``__ldg``; Python a plain subscript)."""

    array: object
    index: object


@dataclass(frozen=True)
class Widened:
    """A stored value of any storage type (``__half`` included) in the compute type ``type`` (C: the runtime's
    ``widen<T>``; Python: a conversion)."""

    type: str
    value: object


@dataclass(frozen=True)
class Apply:
    """``fn<targs>(*args)``: a math or device function (template arguments ``targs``: C only)."""

    fn: str
    args: tuple
    targs: tuple = ()


# ------------------------------------------------------------------------------------------------
# statements

@dataclass(frozen=True)
class Let:
    """Bind ``name`` (type ``type``: a kernel type or a scalar type) to ``value``, once."""

    name: str
    type: str
    value: object


@dataclass(frozen=True)
class Lets:
    """Bind several ``names`` of one ``type`` to ``values`` in one declaration (C ``const T a = x, b = y;``)."""

    type: str
    names: tuple
    values: tuple


@dataclass(frozen=True)
class Vars:
    """Declare several mutable ``names`` of one ``type`` with first ``values`` in one declaration (C
    ``T a = x, b = y;``)."""

    type: str
    names: tuple
    values: tuple


@dataclass(frozen=True)
class Var:
    """Declare the mutable local ``name`` (type ``type``) with the first value ``value`` (later :class:`Set` /
    :class:`Update`)."""

    name: str
    type: str
    value: object


@dataclass(frozen=True)
class Update:
    """``name sym= value`` (a compound update of a :class:`Var`)."""

    name: str
    sym: str
    value: object


@dataclass(frozen=True)
class While:
    """``while cond: body``."""

    cond: object
    body: tuple


@dataclass(frozen=True)
class Decl:
    """A local array ``name`` of ``shape``, written later; where the first axis is that of an unrolled loop (the
    cells of a thread), ``init`` is the value each cell's entry starts from where a language needs one."""

    type: str
    name: str
    shape: tuple
    init: object = None


@dataclass(frozen=True)
class Set:
    """``target = value`` (a local array entry or a device array element)."""

    target: str
    value: object


@dataclass(frozen=True)
class If:
    """``if cond: then else orelse``; ``compact``: one guarded statement written on the line of its guard."""

    cond: object
    then: tuple
    orelse: tuple = ()
    compact: bool = False
    note: str = ""


@dataclass(frozen=True)
class Return:
    """Leave the kernel, or a device function with the result ``value``."""

    value: object = None


@dataclass(frozen=True)
class Block:
    """A scope of its own (its names do not leak)."""

    body: tuple


@dataclass(frozen=True)
class Unrolled:
    """``for var in range(n)``, unrolled (``name[var]`` of a per-cell array is one local per iteration);
    ``compact``: C writes the one statement of the body on the line of the loop, without braces."""

    var: str
    n: int
    body: tuple
    compact: bool = False


@dataclass(frozen=True)
class GridLoop:
    """``for var`` over ``0 .. n - 1``, grid-stride: every thread of the grid takes every grid-size-th ``var``."""

    var: str
    n: object
    body: tuple


@dataclass(frozen=True)
class BlockLoop:
    """``for var`` over ``0 .. n - 1`` shared by the threads of one block (block-stride)."""

    var: str
    n: object
    body: tuple


@dataclass(frozen=True)
class Range:
    """``for var in range(lo, hi)`` (``lo`` None: from 0), one thread's counted loop."""

    var: str
    lo: object
    hi: object
    body: tuple


@dataclass(frozen=True)
class Continue:
    """The next iteration of the innermost loop."""


@dataclass(frozen=True)
class Barrier:
    """Wait for every thread of the block (C ``__syncthreads``)."""


@dataclass(frozen=True)
class Call:
    """``out = fn(*args)``; a device function whose result (a population array) is written into ``out``."""

    fn: str
    args: tuple
    out: str | None = None


# ------------------------------------------------------------------------------------------------
# containers

@dataclass(frozen=True)
class Kernel:
    """A kernel: arguments ``(name, kind)`` (see the printers' argument tables), its ``body``; ``bounds``: it
    takes the step kernels' launch qualifier; ``views``: ``(name, array, kind)``, the 32-bit word views of population
    arrays (C: a cast of the array; Python: one more argument, after the arrays)."""

    name: str
    doc: str
    args: tuple
    body: tuple
    bounds: bool = False
    views: tuple = ()


@dataclass(frozen=True)
class Function:
    """A device function: arguments as a :class:`Kernel`'s, its ``body``, the values it gives back ``returns``
    (``(name, type)``, or ``(name, type, value)``: C writes ``value`` through the pointer ``name``); ``inline``: the
    compiler is told to inline it; ``result``: the kernel type of the value a :class:`Return` gives back (C's return
    type; ``""``: none); ``out_array``: ``(name, n)``, an array of n compute-dtype values the function fills (C: the
    last parameter, a pointer; Python: n locals given back as a tuple)."""

    name: str
    doc: str
    args: tuple
    body: tuple
    returns: tuple
    inline: bool = True
    result: str = ""
    out_array: tuple = ()


@dataclass(frozen=True, eq=False)
class Fn:
    """A scalar device function: params ((name, type), ...), and either ``body`` (lines of statements on the params'
    :class:`Ref` s, printed one line per tuple) or, for a primitive, ``c_body`` (verbatim C lines) and ``llvm``
    (builder, *args) -> value."""

    name: str
    ret: str
    params: tuple
    body: tuple = ()
    comment: str = ""
    one_line: bool = False
    c_body: str = ""
    llvm: object = field(default=None, repr=False)

    def __call__(self, *args) -> FnCall:
        return FnCall(self, args)

    def arg(self, i: int) -> Ref:
        return Ref(*self.params[i])


#: every node type of this module (the printers' tests enumerate it)
SCALAR_NODES = (Const, Ref, Bin, IntCast, AsUint, AsFloat, Fabs, Umin, Select, FnCall)
KERNEL_EXPRESSIONS = (Sel, Cast, Fmt, And, Not, Conv, At, Named, IDiv, BinOp, Compare, BoolOp, Unary, Cond, Paren,
                      Index, ReadOnly, Widened, Apply)
STATEMENTS = (Let, Lets, Vars, Var, Update, While, Decl, Set, If, Return, Block, Unrolled, GridLoop, BlockLoop, Range,
              Continue, Barrier, Call)
CONTAINERS = (Kernel, Function, Fn)
