"""Print :class:`hpcsolve.fem.linalg.fused.Fused` descriptions as Python source for ``numba.cuda.jit``: their bodies'
nodes (``Fused.nodes``) through the code generator's Python printer (``hpcsolve.core.codegen.numba``), with what
Numba needs on top:

- declarations ``x: T = e`` become ``x = T(e)`` (the type parameters are bound to NumPy scalar types by the
  caller's scope, so a float32 kernel computes in float32); ``double`` is ``float64``;
- ``for i in grid(n)`` becomes a ``while`` grid-stride loop (``cuda.grid(1)`` / ``cuda.gridsize(1)``);
- an optional array ``p`` becomes two arguments ``p, has_p`` (a placeholder array and a flag), and a test of ``p``
  tests ``has_p``; a device function called with an optional array passes its flag along;
- ``ldg(p, j)`` is ``p[j]``, ``widen(T, v)`` is ``T(v)``, ``fmax`` / ``fabs`` / ``isfinite`` are ``max`` / ``abs`` /
  ``math.isfinite``, ``sync()`` is ``cuda.syncthreads()``; a store of a choice is a branch per value;
- ``wide`` descriptions index in ``I`` (numba's uint64 on a GPU, Python int under the simulator): ``int``
  declarations, loop counters, integer literals and gathered indices in a subscript are ``I``; on a GPU
  (``unsigned``) a test ``x >= 0`` of an index is dropped (always true), so one compare bounds it;
- ``unroll = (count, offsets)``: the ``range(count)`` loop written out for a given count, ``offsets[k]`` read once
  per thread into ``o0, o1, ...`` (a device function takes those instead of ``count`` and ``offsets``).

The text is what ``ast.unparse`` writes (its parentheses and layout). ``numba_source(ops, ...)`` returns the module
text; the caller execs it in a scope that binds ``cuda``, ``math``, ``float64``, the type parameters, ``I``, the
decorators ``kernel`` / ``device`` and the backend's reductions (``block_add2``, ``block_max3``).
"""

from __future__ import annotations

import dataclasses

from hpcsolve.core.codegen import nodes as n
from hpcsolve.core.codegen.numba import PythonPrinter
from hpcsolve.fem.linalg.fused import BY_NAME, Fused

_CASTS = {"double": "float64", "float": "float32", "size_t": "I"}
_ATOM, _CMP_OPERAND = 17, 8


def _bare(node):
    """``node`` without the parentheses written around it (Python's follow its precedence)."""
    return _bare(node.value) if isinstance(node, n.Paren) else node


def _has_continue(stmts) -> bool:
    """A ``continue`` of this loop (not of a loop inside it)."""
    return any(isinstance(s, n.Continue) or (isinstance(s, n.If) and _has_continue(s.then + s.orelse))
               for s in stmts)


def _substitute(node, var: str, value: int):
    """``node`` with the name ``var`` replaced by ``value`` (the unrolled loop counter)."""
    if isinstance(node, str):
        return value if node == var else node
    if isinstance(node, tuple):
        return tuple(_substitute(x, var, value) for x in node)
    if dataclasses.is_dataclass(node):
        return dataclasses.replace(node, **{f.name: _substitute(getattr(node, f.name), var, value)
                                            for f in dataclasses.fields(node)})
    return node


class NumbaPrinter(PythonPrinter):
    """One description printed for Numba (``function()``: its source)."""

    def __init__(self, op: Fused, unsigned: bool, count: int | None = None):
        super().__init__()
        self.op, self.count = op, count
        self.wide = op.wide
        self.unsigned = unsigned and op.wide
        self.optional = {p.name for p in op.args if p.optional}
        # a wide kernel bounds its loops by nn = I(n)
        self.rename = {"n": "nn"} if op.wide and not op.device and any(p.name == "n" for p in op.args) else {}
        if op.unroll and count is None:
            raise ValueError(f"{op.name}: give the unrolled count")

    def name(self, text):
        return self.rename.get(text, text)

    # ---- types
    def declared(self, tname: str, value) -> str:
        """``value`` as a declared ``tname`` (no cast of a plain int; ``I`` in a wide description)."""
        if tname == "int":
            return f"I({self.expr(value)})" if self.wide else self.expr(value)
        func, bare = _CASTS.get(tname, tname), _bare(value)
        if (isinstance(bare, n.Conv) and _CASTS.get(bare.type, bare.type) == func) or (
                isinstance(bare, n.Widened) and bare.type == func):
            return self.expr(value)
        return f"{func}({self.expr(value)})"

    # ---- expressions
    def test(self, node):
        """A condition: an optional array tests its flag."""
        return "has_" + node if isinstance(node, str) and node in self.optional else node

    def index(self, node):
        """A subscript: in a wide description its literals and gathered indices are I."""
        node = _bare(node)
        if not self.wide:
            return node
        if isinstance(node, int):
            return n.Conv("I", node)
        if isinstance(node, n.Index):
            return n.Conv("I", node)
        if isinstance(node, n.BinOp):
            return n.BinOp(node.sym, self.index(node.a), self.index(node.b))
        return node

    def visit_Index(self, e, nested):
        return f"{self.expr(e.array, _ATOM)}[{self.expr(self.index(e.index))}]"

    def visit_ReadOnly(self, e, nested):
        if self.count is not None and isinstance(e.index, int) and e.array == self.op.unroll[1]:
            return f"o{e.index}"
        return self.visit_Index(e, nested)

    def visit_Conv(self, e, nested):
        return f"{_CASTS.get(e.type, e.type)}({self.expr(e.value)})"

    def visit_Cond(self, e, nested):
        return super().visit_Cond(n.Cond(self.test(_bare(e.test)), e.a, e.b), nested)

    def visit_BoolOp(self, e, nested):
        values = list(e.values)
        if self.unsigned and e.sym == "and":                 # an unsigned index is >= 0
            values = [v for v in values if not (isinstance(_bare(v), n.Compare) and _bare(v).sym == ">="
                                                and type(_bare(v).b) is int and _bare(v).b == 0)]
        if len(values) == 1:
            return self.expr(values[0], nested)
        return super().visit_BoolOp(n.BoolOp(e.sym, tuple(values)), nested)

    def visit_Apply(self, e, nested):
        callee = BY_NAME.get(e.fn)
        if callee is None:
            return super().visit_Apply(e, nested)
        out = []                                             # a device function: template arguments dropped
        for p, a in zip(callee.args, e.args, strict=True):
            if callee.unroll and p.name == callee.unroll[0]:
                continue                                     # the count is the unrolled function's
            if callee.unroll and p.name == callee.unroll[1]:
                out += [f"o{k}" for k in range(self.count)]
                continue
            out.append(self.expr(a))
            if p.optional:
                if not (isinstance(a, str) and a in self.optional):
                    raise SyntaxError(f"{self.op.name}: pass {callee.name}'s optional {p.name} an optional array")
                out.append("has_" + a)
        return f"{callee.name}({', '.join(out)})"

    # ---- statements
    def visit_Let(self, s, depth):
        return [f"{self.pad(depth)}{s.name} = {self.declared(s.type, s.value)}"]

    def visit_Var(self, s, depth):
        return self.visit_Let(s, depth)

    def visit_Lets(self, s, depth):
        return [f"{self.pad(depth)}{name} = {self.declared(s.type, v)}" for name, v in zip(s.names, s.values)]

    def visit_Vars(self, s, depth):
        return self.visit_Lets(s, depth)

    @staticmethod
    def as_if(s):
        """The if statement ``s`` prints as: an if, or a store of a choice (a branch per value, so that Numba versions
        no loop on the flag); else None."""
        if isinstance(s, n.If):
            return s
        if isinstance(s, n.Set) and isinstance(_bare(s.value), n.Cond) and not isinstance(s.target, str):
            v = _bare(s.value)
            return n.If(v.test, (n.Set(s.target, v.a),), (n.Set(s.target, v.b),))
        return None

    def visit_Set(self, s, depth):
        split = self.as_if(s)
        return self.visit_If(split, depth) if split is not None else super().visit_Set(s, depth)

    def visit_If(self, s, depth, word: str = "if"):
        out = [f"{self.pad(depth)}{word} {self.expr(self.test(_bare(s.cond)))}:"] + self.block(s.then, depth + 1)
        if len(s.orelse) == 1 and self.as_if(s.orelse[0]) is not None:       # else: if -> elif (ast.unparse)
            return out + self.visit_If(self.as_if(s.orelse[0]), depth, "elif")
        if s.orelse:
            out += [f"{self.pad(depth)}else:"] + self.block(s.orelse, depth + 1)
        return out

    def strided(self, var, start, bound, step, body, depth):
        if _has_continue(body):
            raise SyntaxError(f"{self.op.name}: continue in a loop printed as while")
        return super().strided(var, start, bound, step, body, depth)

    def visit_GridLoop(self, s, depth):
        if not self.wide:
            return super().visit_GridLoop(s, depth)
        first, *loop = self.strided(s.var, "I(cuda.grid(1))", s.n, "step", s.body, depth)
        return [first, f"{self.pad(depth)}step = I(cuda.gridsize(1))", *loop]

    def visit_Range(self, s, depth):
        if self.op.unroll and s.lo is None and s.hi == self.op.unroll[0]:
            out = []
            for k in range(self.count):             # written out: the counter a constant in each copy
                out += self.block(_substitute(s.body, s.var, k), depth)
            return out
        if not self.wide:
            return super().visit_Range(s, depth)
        start = "I(0)" if s.lo is None else f"I({self.expr(s.lo)})"
        return self.strided(s.var, start, s.hi, "I(1)", s.body, depth)

    # ---- the function
    def params(self) -> list[str]:
        out = []
        for p in self.op.args:
            if self.op.unroll and p.name == self.op.unroll[0]:
                continue
            if self.op.unroll and p.name == self.op.unroll[1] and self.op.device:
                out += [f"o{k}" for k in range(self.count)]
                continue
            out += [p.name, "has_" + p.name] if p.optional else [p.name]
        return out

    def function(self) -> str:
        lines = ["nn = I(n)"] if self.rename else []
        if self.op.unroll and not self.op.device:    # the offsets read once per thread
            arr = self.op.unroll[1]
            lines += [f"o{k} = I({arr}[{k}])" for k in range(self.count)]
        body = "\n".join("    " + line for line in lines + self.block(self.op.nodes, 0))
        deco = "@device" if self.op.device else "@kernel"
        return f"{deco}\ndef {self.op.name}({', '.join(self.params())}):\n{body}\n"


def numba_source(ops, unsigned: bool, count: int | None = None) -> str:
    """The Numba source of ``ops`` (descriptions, device functions before their callers), for GPU index types
    (``unsigned``) or the simulator's, with an unrolled ``count`` where a description unrolls."""
    return "\n\n".join(NumbaPrinter(op, unsigned, count if op.unroll else None).function() for op in ops)


def build(ops, scope: dict, unsigned: bool, count: int | None = None, label: str = "") -> dict:
    """Exec ``numba_source(ops)`` in ``scope`` (the kernels' module globals, see the module docstring); returns
    ``{name: kernel or device function}``."""
    text = numba_source(ops, unsigned, count)
    exec(compile(text, f"<fused numba kernels{': ' + label if label else ''}>", "exec"), scope)
    return {op.name: scope[op.name] for op in ops}
