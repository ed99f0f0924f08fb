"""A kernel written in a restricted Python, read into the node set (:mod:`hpcsolve.core.codegen.nodes`).

The language (the FEM's fused operations are written in it, ``hpcsolve.fem.linalg.fused``):

- ``x: T = e`` declares (:class:`~.nodes.Var`; ``x: const(T) = e``: :class:`~.nodes.Let`); ``decl(T, a=e1, b=e2)``
  declares several in one statement (``decl(const(T), ...)``: constants);
- ``for i in grid(n)`` (grid-stride), ``for j in block_stride(K)`` (the threads of one block), ``for k in range(a, b)``
  / ``range(m)``; ``while``, ``if``/``else``, ``continue``, ``return``; ``x = e``, ``x op= e``;
- expressions: ``+ - * / // % >> << & | ^``, comparisons, ``and or not``, ``a if c else b``, subscripts; casts
  ``T(e)`` to a type of ``types``; ``ldg(p, j)`` (a read-only load); ``widen(T, v)``; ``thread_x()``; calls of
  ``functions`` (``f(...)``, or ``f[S, T](...)`` with template arguments); ``sync()`` as a statement (a barrier).

Anything else is a :class:`SyntaxError` naming the kernel. Parentheses written around an operation are kept
(:class:`~.nodes.Paren`): the C printer keeps them where the operation is an operand, so the arithmetic order is the one
written.
"""

from __future__ import annotations

import ast

from hpcsolve.core.codegen import nodes as n
from hpcsolve.core.codegen.printer import Visitor

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.RShift: ">>", ast.LShift: "<<", ast.BitAnd: "&", ast.BitOr: "|", ast.BitXor: "^"}
_CMPOPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_UNARY = {ast.USub: "-", ast.Not: "not", ast.UAdd: "+"}
#: the lowered expressions that are operations (a parenthesized one keeps its parentheses)
_OPERATIONS = (n.BinOp, n.Compare, n.BoolOp, n.Unary, n.Cond, n.Conv)


class Reader(Visitor):
    """Reads one kernel's statements (``source``) into nodes; ``types``: the names that cast, ``functions``: the
    functions it may call; ``where``: the kernel's name in errors."""

    def __init__(self, source: str, types, functions, where: str):
        self.lines = source.splitlines()
        self.types, self.functions, self.where = set(types), set(functions), where

    def read(self, source: str) -> tuple:
        return self.body(ast.parse(source).body)

    def unknown(self, node):
        raise SyntaxError(f"{self.where}: {ast.unparse(node)!r} is not in the kernel language")

    def body(self, stmts) -> tuple:
        return tuple(self.visit(s) for s in stmts)

    # ---- expressions
    def _in_source_parens(self, node) -> bool:
        if getattr(node, "lineno", None) is None or node.lineno != node.end_lineno:
            return False
        line = self.lines[node.lineno - 1]
        return line[:node.col_offset].rstrip().endswith("(") and line[node.end_col_offset:].lstrip().startswith(")")

    def expr(self, node):
        out = self.visit(node)
        return n.Paren(out) if isinstance(out, _OPERATIONS) and self._in_source_parens(node) else out

    def visit_Name(self, node):
        return node.id

    def visit_Constant(self, node):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise SyntaxError(f"{self.where}: constant {node.value!r}")
        return node.value

    def visit_Subscript(self, node):
        return n.Index(self.expr(node.value), self.expr(node.slice))

    def visit_BinOp(self, node):
        return n.BinOp(_BINOPS[type(node.op)], self.expr(node.left), self.expr(node.right))

    def visit_UnaryOp(self, node):
        return n.Unary(_UNARY[type(node.op)], self.expr(node.operand))

    def visit_Compare(self, node):
        if len(node.ops) != 1:
            raise SyntaxError(f"{self.where}: chained comparison {ast.unparse(node)!r}")
        return n.Compare(_CMPOPS[type(node.ops[0])], self.expr(node.left), self.expr(node.comparators[0]))

    def visit_BoolOp(self, node):
        return n.BoolOp("and" if isinstance(node.op, ast.And) else "or", tuple(self.expr(v) for v in node.values))

    def visit_IfExp(self, node):
        return n.Cond(self.expr(node.test), self.expr(node.body), self.expr(node.orelse))

    def visit_Call(self, node):
        func, args = node.func, tuple(self.expr(a) for a in node.args)
        if isinstance(func, ast.Subscript):                  # a device function with template arguments
            targs = func.slice.elts if isinstance(func.slice, ast.Tuple) else [func.slice]
            return n.Apply(self._function(func.value.id), args, tuple(self.expr(t) for t in targs))
        name = func.id
        if name in self.types:                               # a cast
            (arg,) = args
            return n.Conv(name, arg)
        special = getattr(self, "call_" + name, None)       # a built-in of the language
        if special is not None:
            return special(node.args, args)
        return n.Apply(self._function(name), args)

    def _function(self, name: str) -> str:
        if name not in self.functions:
            raise SyntaxError(f"{self.where}: unknown function {name}")
        return name

    def call_ldg(self, nodes, args):
        return n.ReadOnly(*args)

    def call_widen(self, nodes, args):
        return n.Widened(nodes[0].id, args[1])

    def call_thread_x(self, nodes, args):
        return n.Named("thread_x")

    # ---- statements
    @staticmethod
    def _decl_type(node) -> tuple[str, bool]:
        """(type, const) of a declaration's annotation ``T`` / ``const(T)``."""
        if isinstance(node, ast.Call) and node.func.id == "const":
            return node.args[0].id, True
        return node.id, False

    def visit_AnnAssign(self, node):
        ty, const = self._decl_type(node.annotation)
        return (n.Let if const else n.Var)(node.target.id, ty, self.expr(node.value))

    def visit_Assign(self, node):
        (target,) = node.targets
        return n.Set(self.expr(target), self.expr(node.value))

    def visit_AugAssign(self, node):
        return n.Update(self.expr(node.target), _BINOPS[type(node.op)], self.expr(node.value))

    def visit_Expr(self, node):
        call = node.value
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
            return self.unknown(node)
        if call.func.id == "decl":
            ty, const = self._decl_type(call.args[0])
            names = tuple(k.arg for k in call.keywords)
            return (n.Lets if const else n.Vars)(ty, names, tuple(self.expr(k.value) for k in call.keywords))
        if call.func.id == "sync":
            return n.Barrier()
        return n.Call(self._function(call.func.id), tuple(self.expr(a) for a in call.args))

    def visit_Return(self, node):
        return n.Return(self.expr(node.value))

    def visit_Continue(self, node):
        return n.Continue()

    def visit_While(self, node):
        return n.While(self.expr(node.test), self.body(node.body))

    def visit_If(self, node):
        return n.If(self.expr(node.test), self.body(node.body), self.body(node.orelse))

    def visit_For(self, node):
        var, it = node.target.id, node.iter
        args = tuple(self.expr(a) for a in it.args)
        loop = getattr(self, "loop_" + it.func.id, None)
        if loop is None:
            raise SyntaxError(f"{self.where}: loop over {it.func.id}")
        return loop(var, args, self.body(node.body))

    def loop_grid(self, var, args, body):
        return n.GridLoop(var, args[0], body)

    def loop_block_stride(self, var, args, body):
        return n.BlockLoop(var, args[0], body)

    def loop_range(self, var, args, body):
        lo, hi = (None, *args) if len(args) == 1 else args
        return n.Range(var, lo, hi, body)


def read(source: str, types, functions, where: str) -> tuple:
    """The statements of ``source`` (restricted Python, see the module docstring) as nodes."""
    return Reader(source, types, functions, where).read(source)
