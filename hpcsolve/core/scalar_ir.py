"""The typed scalar vocabulary of the storage formats' bit recipes (hpcsolve/core/fp16c.py): constructors of the
code generator's scalar nodes (:mod:`hpcsolve.core.codegen.nodes`) and their two printers, CUDA C
(:func:`c_source`, :func:`c_expr`: :mod:`hpcsolve.core.codegen.c`) and the LLVM IR of Numba intrinsics
(:func:`llvm_call`, :func:`llvm_expr`: :mod:`hpcsolve.core.codegen.llvm`).

Types: ``f32``, ``u32``, ``i32``, ``u16``, ``i16``. Arithmetic follows C on same-typed operands (an ``int``
constant takes the other operand's type); ``>>`` of a signed type is arithmetic. Operations with no single C
operator: :func:`as_uint` / :func:`as_float` (bit casts), :func:`fabs`, :func:`umin` (unsigned), :func:`select`
(``c ? a : b``), :func:`cast` (C casts between integer types: sign or zero extension, truncation) and calls of
other functions (a primitive :class:`Fn` gives its own C body and LLVM emitter, e.g. an IEEE multiply that the
C printer must keep out of a flush-to-zero compile). Statements: :class:`Let` / :class:`Lets` (``const``
declarations), :class:`Var` and :class:`Update` (a mutable variable with compound updates), :class:`Return`.
"""

from __future__ import annotations

from hpcsolve.core.codegen.c import c_expr, c_source
from hpcsolve.core.codegen.nodes import (BITS, AsFloat, AsUint, Fabs, Fn, IntCast, Let, Lets, Ref, Return, Scalar,
                                         Select, Umin, Update, Var, const)

__all__ = ["BITS", "Fn", "Let", "Lets", "Return", "Scalar", "Update", "Var", "as_float", "as_uint", "c_expr",
           "c_source", "cast", "const", "f32", "fabs", "let", "llvm_call", "llvm_expr", "llvm_type", "select", "u32",
           "umin", "var"]


def u32(value: int, text: str | None = None) -> Scalar:
    return const(value, "u32", text)


def f32(value: float, text: str) -> Scalar:
    return const(value, "f32", text)


def var(name: str, ty: str) -> Ref:
    return Ref(name, ty)


def cast(ty: str, x: Scalar) -> Scalar:
    return IntCast(ty, x)


def as_uint(x: Scalar) -> Scalar:
    return AsUint(x)


def as_float(x: Scalar) -> Scalar:
    return AsFloat(x)


def fabs(x: Scalar) -> Scalar:
    return Fabs(x)


def umin(a: Scalar, b) -> Scalar:
    return Umin(a, b if isinstance(b, Scalar) else u32(b))


def select(c: Scalar, a: Scalar, b: Scalar) -> Scalar:
    return Select(c, a, b)


def let(name: str, value: Scalar) -> tuple[Let, Ref]:
    """(the declaration of ``name``, the variable)."""
    return Let(name, value.ty, value), Ref(name, value.ty)


# the LLVM printer: llvmlite (14 ms to import) loads only where a Numba intrinsic or a host test emits IR
def llvm_type(ty: str):
    """The LLVM type of a scalar type."""
    from hpcsolve.core.codegen import llvm  # late: llvmlite loads on first use (start-up cost, above)

    return llvm.llvm_type(ty)


def llvm_call(fn: Fn, b, args: list):
    """Emit the scalar function ``fn`` inline with the llvmlite builder ``b`` on the LLVM values ``args``."""
    from hpcsolve.core.codegen import llvm  # late: llvmlite loads on first use (start-up cost, above)

    return llvm.llvm_call(fn, b, args)


def llvm_expr(b, x: Scalar, env: dict):
    """The LLVM value of the scalar expression ``x`` (``env``: the variables' values)."""
    from hpcsolve.core.codegen import llvm  # late: llvmlite loads on first use (start-up cost, above)

    return llvm.llvm_expr(b, x, env)
