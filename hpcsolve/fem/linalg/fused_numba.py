"""Print :class:`hpcsolve.fem.linalg.fused.Fused` descriptions as Python source for ``numba.cuda.jit``.

The body's restricted Python is rewritten (an :mod:`ast` transform, then ``ast.unparse``) into what Numba compiles:

- declarations ``x: T = e`` become ``x = T(e)`` (the type parameters are bound to NumPy scalar types by the
  caller's scope, so a float32 kernel computes in float32); ``double`` is ``float64``;
- ``for i in grid(n)`` becomes a ``while`` grid-stride loop (``cuda.grid(1)`` / ``cuda.gridsize(1)``);
- an optional array ``p`` becomes two arguments ``p, has_p`` (a placeholder array and a flag), and a test of ``p``
  tests ``has_p``; a device function called with an optional array passes its flag along;
- ``ldg(p, j)`` is ``p[j]``, ``widen(T, v)`` is ``T(v)``, ``fmax`` / ``fabs`` / ``isfinite`` are ``max`` / ``abs`` /
  ``math.isfinite``, ``sync()`` is ``cuda.syncthreads()``;
- ``wide`` descriptions index in ``I`` (numba's uint64 on a GPU, Python int under the simulator): ``int``
  declarations, loop counters, integer literals and gathered indices in a subscript are ``I``; on a GPU
  (``unsigned``) a test ``x >= 0`` of an index is dropped (always true), so one compare bounds it;
- ``unroll = (count, offsets)``: the ``range(count)`` loop written out for a given count, ``offsets[k]`` read once
  per thread into ``o0, o1, ...`` (a device function takes those instead of ``count`` and ``offsets``).

``numba_source(ops, ...)`` returns the module text; the caller execs it in a scope that binds ``cuda``, ``math``,
``float64``, the type parameters, ``I``, the decorators ``kernel`` / ``device`` and the backend's reductions
(``block_add2``, ``block_max3``).
"""

from __future__ import annotations

import ast
import copy

from hpcsolve.fem.linalg.fused import BY_NAME, Fused

_FUNCS = {"fmax": "max", "fabs": "abs", "isfinite": "math.isfinite"}
_CASTS = {"double": "float64", "float": "float32", "size_t": "I"}


def _name(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def _call(func: str, *args) -> ast.Call:
    return ast.Call(func=_name(func), args=list(args), keywords=[])


def _is_call(node, *names) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names


class NumbaPrinter:
    """One description rewritten for Numba (``function()``: its source)."""

    def __init__(self, op: Fused, unsigned: bool, count: int | None = None):
        self.op, self.count = op, count
        self.wide = op.wide
        self.unsigned = unsigned and op.wide
        self.optional = {p.name for p in op.args if p.optional}
        self.types = set(op.types)
        # a wide kernel bounds its loops by nn = I(n)
        self.rename = {"n": "nn"} if op.wide and not op.device and any(p.name == "n" for p in op.args) else {}
        if op.unroll and count is None:
            raise ValueError(f"{op.name}: give the unrolled count")

    # ---- types
    def cast(self, tname: str, value: ast.expr) -> ast.expr:
        """``value`` as a declared ``tname`` (no cast of a plain int; ``I`` in a wide description)."""
        if tname == "int":
            return _call("I", value) if self.wide else value
        func = _CASTS.get(tname, tname)
        if _is_call(value, func):
            return value
        return _call(func, value)

    @staticmethod
    def _decl_type(node) -> str:
        return NumbaPrinter._decl_type(node.args[0]) if _is_call(node, "const") else node.id

    # ---- expressions
    def expr(self, node: ast.expr) -> ast.expr:
        if isinstance(node, ast.Name):
            return ast.Name(id=self.rename.get(node.id, node.id), ctx=ast.Load())
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Subscript):
            return ast.Subscript(value=self.expr(node.value), slice=self.index(node.slice), ctx=ast.Load())
        if isinstance(node, ast.IfExp):
            return ast.IfExp(test=self.test(node.test), body=self.expr(node.body), orelse=self.expr(node.orelse))
        if isinstance(node, ast.BoolOp):
            return self._boolop(node)
        node = copy.copy(node)
        for field in ("left", "right", "operand"):
            if hasattr(node, field):
                setattr(node, field, self.expr(getattr(node, field)))
        if isinstance(node, ast.Compare):
            node.comparators = [self.expr(c) for c in node.comparators]
        return node

    def _boolop(self, node: ast.BoolOp) -> ast.expr:
        values = [self.expr(v) for v in node.values]
        if self.unsigned and isinstance(node.op, ast.And):      # an unsigned index is >= 0
            values = [v for v in values if not (isinstance(v, ast.Compare) and isinstance(v.ops[0], ast.GtE)
                                                and isinstance(v.comparators[0], ast.Constant)
                                                and v.comparators[0].value == 0)]
        return values[0] if len(values) == 1 else ast.BoolOp(op=node.op, values=values)

    def test(self, node: ast.expr) -> ast.expr:
        """A condition: an optional array tests its flag."""
        if isinstance(node, ast.Name) and node.id in self.optional:
            return ast.Name(id="has_" + node.id, ctx=ast.Load())
        return self.expr(node)

    def index(self, node: ast.expr) -> ast.expr:
        """A subscript: in a wide description its literals and gathered indices are I."""
        if not self.wide:
            return self.expr(node)
        if isinstance(node, ast.Constant):
            return _call("I", node)
        if isinstance(node, ast.Subscript):
            return _call("I", self.expr(node))
        if isinstance(node, ast.BinOp):
            return ast.BinOp(left=self.index(node.left), op=node.op, right=self.index(node.right))
        return self.expr(node)

    def _call(self, node: ast.Call) -> ast.expr:
        func = node.func
        if isinstance(func, ast.Subscript):                 # a device function: template arguments dropped
            return self._device_call(BY_NAME[func.value.id], node.args)
        name = func.id
        if name == "ldg":
            arr, idx = node.args
            if self.count is not None and isinstance(idx, ast.Constant) and arr.id == self.op.unroll[1]:
                return ast.Name(id=f"o{idx.value}", ctx=ast.Load())
            return ast.Subscript(value=self.expr(arr), slice=self.index(idx), ctx=ast.Load())
        if name == "widen":
            return _call(node.args[0].id, self.expr(node.args[1]))
        if name == "thread_x":
            return _name("cuda.threadIdx.x")
        if name == "sync":
            return _call("cuda.syncthreads")
        if name in self.types or name in _CASTS:
            return _call(_CASTS.get(name, name), *[self.expr(a) for a in node.args])
        if name in BY_NAME:
            return self._device_call(BY_NAME[name], node.args)
        return _call(_FUNCS.get(name, name), *[self.expr(a) for a in node.args])

    def _device_call(self, callee: Fused, args) -> ast.Call:
        out = []
        for p, a in zip(callee.args, args, strict=True):
            if callee.unroll and p.name == callee.unroll[0]:
                continue                                     # the count is the unrolled function's
            if callee.unroll and p.name == callee.unroll[1]:
                out += [ast.Name(id=f"o{k}", ctx=ast.Load()) for k in range(self.count)]
                continue
            out.append(self.expr(a))
            if p.optional:
                if not (isinstance(a, ast.Name) and a.id in self.optional):
                    raise SyntaxError(f"{self.op.name}: pass {callee.name}'s optional {p.name} an optional array")
                out.append(ast.Name(id="has_" + a.id, ctx=ast.Load()))
        return ast.Call(func=ast.Name(id=callee.name, ctx=ast.Load()), args=out, keywords=[])

    # ---- statements
    def body(self, stmts) -> list[ast.stmt]:
        out = []
        for s in stmts:
            out += self.stmt(s)
        return out

    def stmt(self, node) -> list[ast.stmt]:
        if isinstance(node, ast.AnnAssign):
            return [self._assign(node.target.id, self.cast(self._decl_type(node.annotation), self.expr(node.value)))]
        if isinstance(node, ast.Expr) and _is_call(node.value, "decl"):
            t = self._decl_type(node.value.args[0])
            return [self._assign(k.arg, self.cast(t, self.expr(k.value))) for k in node.value.keywords]
        if isinstance(node, ast.For):
            return self._for(node)
        if isinstance(node, ast.While):
            return [ast.While(test=self.expr(node.test), body=self.body(node.body), orelse=[])]
        if isinstance(node, ast.If):
            return [ast.If(test=self.test(node.test), body=self.body(node.body), orelse=self.body(node.orelse))]
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.IfExp) and isinstance(node.targets[0],
                                                                                            ast.Subscript):
            # a store of a choice: a branch per value (Numba then versions no loop on the flag)
            target, v = node.targets[0], node.value
            return [ast.If(test=self.test(v.test), body=self.stmt(ast.Assign(targets=[target], value=v.body)),
                           orelse=self.stmt(ast.Assign(targets=[target], value=v.orelse)))]
        if isinstance(node, ast.Assign):
            return [ast.Assign(targets=[self.expr(node.targets[0])], value=self.expr(node.value))]
        if isinstance(node, ast.AugAssign):
            return [ast.AugAssign(target=self.expr(node.target), op=node.op, value=self.expr(node.value))]
        if isinstance(node, ast.Expr):
            return [ast.Expr(value=self.expr(node.value))]
        if isinstance(node, ast.Return):
            return [ast.Return(value=self.expr(node.value))]
        if isinstance(node, ast.Continue):
            return [node]
        raise SyntaxError(f"{self.op.name}: statement {ast.unparse(node)!r} is not in the kernel language")

    @staticmethod
    def _assign(name: str, value: ast.expr) -> ast.Assign:
        return ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=value, lineno=0)

    def _while(self, var: str, start: ast.expr, bound: ast.expr, step: ast.expr, body) -> list[ast.stmt]:
        """``var = start; while var < bound: body; var += step`` (a ``continue`` would skip the step: refused)."""
        inner = self.body(body)
        if _has_continue(inner):
            raise SyntaxError(f"{self.op.name}: continue in a loop printed as while")
        test = ast.Compare(left=ast.Name(id=var, ctx=ast.Load()), ops=[ast.Lt()], comparators=[bound])
        inc = ast.AugAssign(target=ast.Name(id=var, ctx=ast.Store()), op=ast.Add(), value=step)
        return [self._assign(var, start), ast.While(test=test, body=inner + [inc], orelse=[])]

    def _for(self, node: ast.For) -> list[ast.stmt]:
        var, it = node.target.id, node.iter
        kind, args = it.func.id, [self.expr(a) for a in it.args]
        if kind == "grid":
            if self.wide:
                first, loop = self._while(var, _call("I", _name("cuda.grid(1)")), args[0], _name("step"), node.body)
                return [first, self._assign("step", _call("I", _name("cuda.gridsize(1)"))), loop]
            return self._while(var, _name("cuda.grid(1)"), args[0], _name("cuda.gridsize(1)"), node.body)
        if kind == "block_stride":
            return self._while(var, _name("cuda.threadIdx.x"), args[0], _name("cuda.blockDim.x"), node.body)
        if kind != "range":
            raise SyntaxError(f"{self.op.name}: loop over {kind}")
        if self.op.unroll and len(it.args) == 1 and it.args[0].id == self.op.unroll[0]:
            out = []
            for k in range(self.count):             # written out: the counter a constant in each copy
                out += self.body([_Substitute(var, k).visit(s) for s in copy.deepcopy(node.body)])
            return out
        if self.wide:
            lo, hi = ([_call("I", ast.Constant(0)), *args] if len(args) == 1 else [_call("I", args[0]), args[1]])
            return self._while(var, lo, hi, _call("I", ast.Constant(1)), node.body)
        return [ast.For(target=node.target, iter=_call("range", *args), body=self.body(node.body), orelse=[])]

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
        stmts = []
        if self.rename:
            stmts.append(self._assign("nn", _call("I", _name("n"))))
        if self.op.unroll and not self.op.device:    # the offsets read once per thread
            arr = self.op.unroll[1]
            stmts += [self._assign(f"o{k}", _call("I", _name(f"{arr}[{k}]"))) for k in range(self.count)]
        stmts += self.body(ast.parse(self.op.source).body)
        module = ast.fix_missing_locations(ast.Module(body=stmts, type_ignores=[]))
        body = "\n".join("    " + line for line in ast.unparse(module).splitlines())
        deco = "@device" if self.op.device else "@kernel"
        return f"{deco}\ndef {self.op.name}({', '.join(self.params())}):\n{body}\n"


def _has_continue(stmts) -> bool:
    """A ``continue`` of this loop (not of a loop inside it)."""
    for s in stmts:
        if isinstance(s, ast.Continue):
            return True
        if isinstance(s, ast.If) and _has_continue(s.body + s.orelse):
            return True
    return False


class _Substitute(ast.NodeTransformer):
    """The unrolled loop counter replaced by its value."""

    def __init__(self, var: str, value: int):
        self.var, self.value = var, value

    def visit_Name(self, node):
        return ast.Constant(self.value) if node.id == self.var else node


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
