"""The Numba printer of the typed scalar nodes (:mod:`hpcsolve.core.codegen.nodes`): a scalar device function
emitted inline into an llvmlite ``IRBuilder`` (the body of a Numba intrinsic), operation for operation as the C
printer writes it; one ``visit_<ClassName>`` method per node type. Numba's own integer arithmetic widens to 64
bits, so the codecs' 32-bit recipes reach Numba kernels this way. No LLVM intrinsics (NVVM rejected a declared
``llvm.fabs.f32``)."""

from __future__ import annotations

import struct

from llvmlite import ir

from hpcsolve.core.codegen.nodes import BITS, SIGNED, Bin, Const, Fabs, Ref, const
from hpcsolve.core.codegen.printer import Visitor

_FLOAT_OPS = {"*": "fmul", "+": "fadd", "-": "fsub"}
_INT_OPS = {"+": "add", "-": "sub", "*": "mul", "&": "and_", "|": "or_", "^": "xor", "<<": "shl"}
_COMPARE = ("<", ">=", "==")
_FOLD = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "&": int.__and__, "|": int.__or__, "^": int.__xor__,
         "<<": int.__lshift__, ">>": int.__rshift__}


def llvm_type(ty: str):
    """The LLVM type of a scalar type."""
    return ir.FloatType() if ty == "f32" else ir.IntType(BITS[ty])


def _abs_equals(b, v, c: float):
    """|v| == c (c a float constant, not NaN) as an integer test of v's bits without the sign: no fabs, and
    the same instructions as a test of the magnitude bits."""
    i32 = ir.IntType(32)
    bits = struct.unpack("<I", struct.pack("<f", abs(c)))[0]
    return b.icmp_unsigned("==", b.and_(b.bitcast(v, i32), ir.Constant(i32, 0x7FFFFFFF)), ir.Constant(i32, bits))


class LLVMPrinter(Visitor):
    """Emits scalar nodes with the builder ``b``; ``env``: the LLVM values of the variables in scope."""

    def __init__(self, b, env: dict):
        self.b, self.env = b, env

    def value(self, x):
        """The LLVM value of ``x`` (a constant integer expression folds to a constant first)."""
        return self.visit(x)

    # expressions
    def visit_Const(self, x):
        if x.ty == "f32":
            return ir.Constant(ir.FloatType(), x.value)
        return ir.Constant(llvm_type(x.ty), x.value & ((1 << BITS[x.ty]) - 1))

    def visit_Ref(self, x):
        return self.env[x.name]

    def visit_FnCall(self, x):
        return llvm_call(x.fn, self.b, [self.value(a) for a in x.args])

    def visit_Bin(self, x):
        b, op, left, right = self.b, x.sym, x.a, x.b
        if isinstance(left, Const) and isinstance(right, Const) and left.ty != "f32":
            folded = _FOLD[op](left.value, right.value) & ((1 << BITS[left.ty]) - 1)
            return self.visit_Const(const(folded, left.ty))
        if op == "==" and isinstance(left, Fabs) and isinstance(right, Const) and right.value == right.value:
            return _abs_equals(b, self.value(left.x), right.value)
        u, v = self.value(left), self.value(right)
        if left.ty == "f32":
            if op in _COMPARE:
                return b.fcmp_ordered(op, u, v)
            return getattr(b, _FLOAT_OPS[op])(u, v)
        if op in _COMPARE:
            return (b.icmp_signed if left.ty in SIGNED else b.icmp_unsigned)(op, u, v)
        if op == ">>":
            return (b.ashr if left.ty in SIGNED else b.lshr)(u, v)
        return getattr(b, _INT_OPS[op])(u, v)

    def visit_AsUint(self, x):
        return self.b.bitcast(self.value(x.x), ir.IntType(32))

    def visit_AsFloat(self, x):
        if isinstance(x.x, Const):
            return ir.Constant(ir.FloatType(), struct.unpack("<f", struct.pack("<I", x.x.value))[0])
        return self.b.bitcast(self.value(x.x), ir.FloatType())

    def visit_Fabs(self, x):            # the bits without the sign (NVVM here takes no LLVM intrinsics)
        b, i32 = self.b, ir.IntType(32)
        return b.bitcast(b.and_(b.bitcast(self.value(x.x), i32), ir.Constant(i32, 0x7FFFFFFF)), ir.FloatType())

    def visit_Umin(self, x):
        a, c = self.value(x.a), self.value(x.b)
        return self.b.select(self.b.icmp_unsigned("<", a, c), a, c)

    def visit_Select(self, x):
        return self.b.select(self.value(x.cond), self.value(x.a), self.value(x.b))

    def visit_IntCast(self, x):
        arg = self.value(x.x)
        src, dst = BITS[x.x.ty], BITS[x.ty]
        if dst > src:
            return (self.b.sext if x.x.ty in SIGNED else self.b.zext)(arg, llvm_type(x.ty))
        return self.b.trunc(arg, llvm_type(x.ty)) if dst < src else arg

    # statements: bind names; a return gives the function's value
    def visit_Let(self, s):
        self.env[s.name] = self.value(s.value)

    def visit_Lets(self, s):
        for n, v in zip(s.names, s.values):
            self.env[n] = self.value(v)

    def visit_Var(self, s):
        self.env[s.name] = self.value(s.value)

    def visit_Update(self, s):
        self.env[s.name] = self.value(Bin(s.sym, Ref(s.name, s.value.ty), s.value, s.value.ty))

    def visit_Return(self, s):
        return self.value(s.value)

    def visit_Fn(self, fn, args: list):
        """``fn`` inline on the LLVM values ``args``: its value."""
        if fn.llvm is not None:
            return fn.llvm(self.b, *args)
        self.env = {name: a for (name, _), a in zip(fn.params, args)}
        for line in fn.body:
            for s in line:
                result = self.visit(s)
                if result is not None:
                    return result
        raise ValueError(f"{fn.name} has no return")


def llvm_call(fn, b, args: list):
    """Emit the scalar function ``fn`` inline with the builder ``b`` on the LLVM values ``args`` (of the params'
    LLVM types)."""
    return LLVMPrinter(b, {}).visit(fn, list(args))


def llvm_expr(b, x, env: dict):
    """The LLVM value of the scalar expression ``x`` (``env``: the variables' values)."""
    return LLVMPrinter(b, env).value(x)
