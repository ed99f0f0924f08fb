"""A small IR of 32- and 16-bit scalar integer and float operations, with a CUDA C printer and an LLVM IR printer.

A storage format's bit recipe (hpcsolve/core/fp16c.py) is written once as :class:`Fn` objects: typed expressions
(:class:`X`, built with Python's operators and the functions below) in statements (``const`` declarations, a
mutable variable with compound updates, a return). :func:`c_source` prints them as CUDA C device functions,
:func:`llvm_call` emits them into an llvmlite ``IRBuilder`` (inlined: Numba intrinsics), operation for operation.

Types: ``f32``, ``u32``, ``i32``, ``u16``, ``i16``. Arithmetic follows C on same-typed operands (an ``int``
constant takes the other operand's type); ``>>`` of a signed type is arithmetic. Operations with no single C
operator: :func:`as_uint` / :func:`as_float` (bit casts), :func:`fabs`, :func:`umin` (unsigned), :func:`select`
(``c ? a : b``), :func:`cast` (C casts between integer types: sign or zero extension, truncation) and calls of
other functions (a primitive :class:`Fn` gives its own C body and LLVM emitter, e.g. an IEEE multiply that the
C printer must keep out of a flush-to-zero compile).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

C_TYPES = {"f32": "float", "u32": "unsigned int", "i32": "int", "u16": "unsigned short", "i16": "short"}
BITS = {"f32": 32, "u32": 32, "i32": 32, "u16": 16, "i16": 16}
SIGNED = {"i32", "i16"}
_ARITH = {"*": 3, "+": 4, "-": 4}
_COMPARE = {"<": "<", ">=": ">=", "==": "=="}
_WIDTH = 120            # C lines longer than this are wrapped


class X:
    """An expression: ``op`` ('const', 'var', a binary operator, 'cast', 'call', ...), its arguments and type."""

    __slots__ = ("op", "args", "ty", "text")

    def __init__(self, op: str, args: tuple, ty: str, text: str | None = None):
        self.op, self.args, self.ty, self.text = op, args, ty, text

    def _bin(self, sym: str, other, ty: str | None = None, swap: bool = False) -> "X":
        other = other if isinstance(other, X) else const(other, self.ty, str(other) if sym in ("<<", ">>") else None)
        a, b = (other, self) if swap else (self, other)
        return X(sym, (a, b), ty or a.ty)

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


def const(value, ty: str, text: str | None = None) -> X:
    """A constant; ``text`` its C spelling (default: ``0x..u`` / ``..u`` for unsigned, decimal for signed)."""
    if text is None:
        if ty in SIGNED:
            text = str(value)
        elif ty == "f32":
            text = repr(float(value)) + "f"
        else:
            text = f"{value}u" if value < 10 else f"0x{value:X}u"
    return X("const", (value,), ty, text)


def u32(value: int, text: str | None = None) -> X:
    return const(value, "u32", text)


def f32(value: float, text: str) -> X:
    return const(value, "f32", text)


def var(name: str, ty: str) -> X:
    return X("var", (name,), ty)


def cast(ty: str, x: X) -> X:
    return X("cast", (x,), ty)


def as_uint(x: X) -> X:
    return X("as_uint", (x,), "u32")


def as_float(x: X) -> X:
    return X("as_float", (x,), "f32")


def fabs(x: X) -> X:
    return X("fabs", (x,), "f32")


def umin(a: X, b) -> X:
    return X("umin", (a, b if isinstance(b, X) else u32(b)), "u32")


def select(c: X, a: X, b: X) -> X:
    return X("select", (c, a, b), a.ty)


def call(fn: "Fn", *args: X) -> X:
    return X("call", (fn, *args), fn.ret)


# ---- statements: printed one line per tuple of statements
@dataclass(frozen=True)
class Let:
    """``const T a = x, b = y;`` (one type)."""
    names: tuple
    values: tuple


@dataclass(frozen=True)
class Var:
    """``T name = x;`` (a variable :class:`Update` changes)."""
    name: str
    value: X


@dataclass(frozen=True)
class Update:
    """``name op= x;``"""
    name: str
    sym: str
    value: X


@dataclass(frozen=True)
class Ret:
    value: X


@dataclass(frozen=True, eq=False)
class Fn:
    """A device function: params ((name, type), ...), and either ``body`` (lines of statements of the params'
    :func:`var` s) or, for a primitive, ``c_body`` (verbatim C lines) and ``llvm`` (builder, *args) -> value."""
    name: str
    ret: str
    params: tuple
    body: tuple = ()
    comment: str = ""
    one_line: bool = False
    c_body: str = ""
    llvm: object = field(default=None, repr=False)

    def __call__(self, *args) -> X:
        return call(self, *args)

    def arg(self, i: int) -> X:
        return var(*self.params[i])


def let(name: str, value: X) -> tuple[Let, X]:
    """(the declaration of ``name``, the variable)."""
    return Let((name,), (value,)), var(name, value.ty)


# ---- the C printer
def _c(x: X, parent: str | None = None, left: bool = True) -> str:
    op = x.op
    if op == "const":
        return x.text
    if op == "var":
        return x.args[0]
    if op == "call":
        return f"{x.args[0].name}({', '.join(_c(a) for a in x.args[1:])})"
    if op in ("as_uint", "as_float", "fabs", "umin"):
        name = {"as_uint": "__float_as_uint", "as_float": "__uint_as_float", "fabs": "fabsf", "umin": "min"}[op]
        return f"{name}({', '.join(_c(a) for a in x.args)})"
    if op == "cast":
        inner = _c(x.args[0], "cast")
        return f"({C_TYPES[x.ty]}){inner}"
    if op == "select":
        text = f"{_c(x.args[0])} ? {_c(x.args[1])} : {_c(x.args[2])}"
        return text if parent is None else f"({text})"
    text = f"{_c(x.args[0], op, True)} {op} {_c(x.args[1], op, False)}"
    if parent is None:
        return text
    if parent == op and left:
        return text
    if parent in _ARITH and op in _ARITH and (_ARITH[op] < _ARITH[parent] or (_ARITH[op] == _ARITH[parent] and left)):
        return text
    return f"({text})"


def _c_statement(s) -> str:
    if isinstance(s, Let):
        decls = ", ".join(f"{n} = {_c(v)}" for n, v in zip(s.names, s.values))
        return f"const {C_TYPES[s.values[0].ty]} {decls};"
    if isinstance(s, Var):
        return f"{C_TYPES[s.value.ty]} {s.name} = {_c(s.value)};"
    if isinstance(s, Update):
        return f"{s.name} {s.sym}= {_c(s.value)};"
    text = f"return {_c(s.value)};"
    v = s.value
    if len(text) + 2 > _WIDTH and v.op not in ("const", "var", "call", "select", "cast"):
        first, rest = v, []                     # break a chain a op b op c after its first operand
        while first.op == v.op and first.op not in ("const", "var", "call", "select", "cast"):
            rest.insert(0, first.args[1])
            first = first.args[0]
        tail = f" {v.op} ".join(_c(r, v.op, False) for r in rest)
        text = f"return {_c(first, v.op)}\n{' ' * 9}{v.op} {tail};"
    return text


def c_function(fn: Fn) -> str:
    """The CUDA C ``__device__ __forceinline__`` definition of ``fn``, its comment lines first."""
    head = f"__device__ __forceinline__ {C_TYPES[fn.ret]} {fn.name}("
    params = [f"const {C_TYPES[t]} {n}" for n, t in fn.params]
    sig = head + ", ".join(params) + ") {"
    if len(sig) > _WIDTH:                       # wrap the parameters under the first one
        lines, line = [], head
        for k, p in enumerate(params):
            piece = p + (", " if k < len(params) - 1 else ") {")
            if len(line) + len(piece.rstrip()) > _WIDTH and line.strip() != head.strip():
                lines.append(line.rstrip())
                line = " " * len(head)
            line += piece
        sig = "\n".join(lines + [line])
    comment = "".join(f"// {line}\n" for line in fn.comment.splitlines())
    if fn.c_body:
        return f"{comment}{sig}\n{fn.c_body}}}\n"
    body = [" ".join(_c_statement(s) for s in line) for line in fn.body]
    if fn.one_line:
        return f"{comment}{sig} {' '.join(body)} }}\n"
    return comment + sig + "\n" + "".join(f"  {line}\n" for line in body) + "}\n"


def c_source(fns) -> str:
    """The C definitions of ``fns``, in order."""
    return "".join(c_function(fn) for fn in fns)


# ---- the LLVM printer
def _ir():
    from llvmlite import ir     # optional dependency (Numba's)

    return ir


def llvm_type(ty: str):
    ir = _ir()
    return ir.FloatType() if ty == "f32" else ir.IntType(BITS[ty])


def _fold(sym: str, a: int, b: int, ty: str):
    mask = (1 << BITS[ty]) - 1
    value = {"+": a + b, "-": a - b, "*": a * b, "&": a & b, "|": a | b, "^": a ^ b, "<<": a << b, ">>": a >> b}[sym]
    return value & mask


def _llvm_const(x: X):
    ir = _ir()
    if x.ty == "f32":
        return ir.Constant(ir.FloatType(), x.args[0])
    return ir.Constant(llvm_type(x.ty), x.args[0] & ((1 << BITS[x.ty]) - 1))


def _llvm(b, x: X, env: dict):
    """The value of ``x`` emitted with the builder ``b`` (``env``: the variables' values); a constant
    expression folds to a Python value first."""
    ir = _ir()
    op = x.op
    if op == "const":
        return _llvm_const(x)
    if op == "var":
        return env[x.args[0]]
    if op == "call":
        return llvm_call(x.args[0], b, [_llvm(b, a, env) for a in x.args[1:]])
    if op in _ARITH or op in ("&", "|", "^", "<<", ">>") or op in _COMPARE:
        left, right = x.args
        if left.op == "const" and right.op == "const" and left.ty != "f32":
            return _llvm_const(const(_fold(op, left.args[0], right.args[0], left.ty), left.ty))
        if op == "==" and left.op == "fabs" and right.op == "const" and right.args[0] == right.args[0]:
            return _abs_equals(b, _llvm(b, left.args[0], env), right.args[0])
        u, v = _llvm(b, left, env), _llvm(b, right, env)
        if left.ty == "f32":
            if op in _COMPARE:
                return b.fcmp_ordered(op, u, v)
            return {"*": b.fmul, "+": b.fadd, "-": b.fsub}[op](u, v)
        if op in _COMPARE:
            return (b.icmp_signed if left.ty in SIGNED else b.icmp_unsigned)(op, u, v)
        if op == ">>":
            return (b.ashr if left.ty in SIGNED else b.lshr)(u, v)
        return {"+": b.add, "-": b.sub, "*": b.mul, "&": b.and_, "|": b.or_, "^": b.xor, "<<": b.shl}[op](u, v)
    args = [_llvm(b, a, env) for a in x.args]
    if op == "as_uint":
        return b.bitcast(args[0], ir.IntType(32))
    if op == "as_float":
        if x.args[0].op == "const":
            return ir.Constant(ir.FloatType(), struct.unpack("<f", struct.pack("<I", x.args[0].args[0]))[0])
        return b.bitcast(args[0], ir.FloatType())
    if op == "fabs":            # the bits without the sign (NVVM here takes no LLVM intrinsics)
        i32 = ir.IntType(32)
        return b.bitcast(b.and_(b.bitcast(args[0], i32), ir.Constant(i32, 0x7FFFFFFF)), ir.FloatType())
    if op == "umin":
        return b.select(b.icmp_unsigned("<", args[0], args[1]), args[0], args[1])
    if op == "select":
        return b.select(*args)
    if op == "cast":
        src, dst = BITS[x.args[0].ty], BITS[x.ty]
        if dst > src:
            return (b.sext if x.args[0].ty in SIGNED else b.zext)(args[0], llvm_type(x.ty))
        return b.trunc(args[0], llvm_type(x.ty)) if dst < src else args[0]
    raise ValueError(f"unknown operation {op!r}")


def _abs_equals(b, v, c: float):
    """|v| == c (c a float constant, not NaN) as an integer test of v's bits without the sign: no fabs, and
    the same instructions as a test of the magnitude bits."""
    ir = _ir()
    i32 = ir.IntType(32)
    bits = struct.unpack("<I", struct.pack("<f", abs(c)))[0]
    return b.icmp_unsigned("==", b.and_(b.bitcast(v, i32), ir.Constant(i32, 0x7FFFFFFF)), ir.Constant(i32, bits))


def llvm_call(fn: Fn, b, args: list):
    """Emit ``fn`` inline with the builder ``b`` on the LLVM values ``args`` (of the params' LLVM types)."""
    if fn.llvm is not None:
        return fn.llvm(b, *args)
    env = {name: a for (name, _), a in zip(fn.params, args)}
    for line in fn.body:
        for s in line:
            if isinstance(s, Let):
                for n, v in zip(s.names, s.values):
                    env[n] = _llvm(b, v, env)
            elif isinstance(s, Var):
                env[s.name] = _llvm(b, s.value, env)
            elif isinstance(s, Update):
                env[s.name] = _llvm(b, X(s.sym, (var(s.name, s.value.ty), s.value), s.value.ty), env)
            else:
                return _llvm(b, s.value, env)
    raise ValueError(f"{fn.name} has no return")
