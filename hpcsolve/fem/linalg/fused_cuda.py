"""Print a :class:`hpcsolve.fem.linalg.fused.Fused` description as CUDA C (a ``__global__`` template kernel or a
``__device__ __forceinline__`` function). The body's restricted Python (see ``fused``) maps one to one onto C:
declarations, ``GRID_STRIDE`` loops, ``for``/``while``/``if``, expressions with C precedence; parentheses written
in the description are kept, so the arithmetic order is the one written there.
"""

from __future__ import annotations

import ast

from hpcsolve.fem.linalg.fused import Fused

INDENT = "    "

_BINOPS = {ast.Add: ("+", 10), ast.Sub: ("-", 10), ast.Mult: ("*", 11), ast.Div: ("/", 11), ast.FloorDiv: ("/", 11),
           ast.Mod: ("%", 11), ast.RShift: (">>", 9), ast.LShift: ("<<", 9), ast.BitAnd: ("&", 6),
           ast.BitOr: ("|", 4), ast.BitXor: ("^", 5)}
_CMPOPS = {ast.Lt: ("<", 8), ast.LtE: ("<=", 8), ast.Gt: (">", 8), ast.GtE: (">=", 8), ast.Eq: ("==", 7),
           ast.NotEq: ("!=", 7)}
_FUNCS = {"fmax": "fmax", "fabs": "fabs", "isfinite": "isfinite", "coef": "coef", "block_add2": "block_add2",
          "block_max3": "block_max3"}
_SCALAR_TYPES = ("double", "float", "int", "size_t")
_ATOM, _UNARY = 13, 12


class CudaPrinter:
    """One description printed as C (``print_cuda(op)``)."""

    def __init__(self, op: Fused):
        self.op = op
        self.lines = op.source.splitlines()
        self.types = set(op.types) | set(_SCALAR_TYPES)

    # ---- expressions: (text, precedence)
    def _in_source_parens(self, node) -> bool:
        if getattr(node, "lineno", None) is None or node.lineno != node.end_lineno:
            return False
        line = self.lines[node.lineno - 1]
        return line[:node.col_offset].rstrip().endswith("(") and line[node.end_col_offset:].lstrip().startswith(")")

    def operand(self, node, prec: int) -> str:
        text, p = self.expr(node)
        if p < prec or (p < _ATOM and self._in_source_parens(node)):
            return f"({text})"
        return text

    def expr(self, node) -> tuple[str, int]:
        method = getattr(self, "_" + type(node).__name__, None)
        if method is None:
            raise SyntaxError(f"{self.op.name}: {ast.unparse(node)!r} is not in the kernel language")
        return method(node)

    def text(self, node) -> str:
        return self.expr(node)[0]

    def _Name(self, node):
        return node.id, _ATOM

    def _Constant(self, node):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise SyntaxError(f"{self.op.name}: constant {node.value!r}")
        return repr(node.value), _ATOM

    def _Subscript(self, node):
        return f"{self.operand(node.value, _ATOM)}[{self.text(node.slice)}]", _ATOM

    def _BinOp(self, node):
        op, p = _BINOPS[type(node.op)]
        return f"{self.operand(node.left, p)} {op} {self.operand(node.right, p + 1)}", p

    def _UnaryOp(self, node):
        op = {ast.USub: "-", ast.Not: "!", ast.UAdd: "+"}[type(node.op)]
        return f"{op}{self.operand(node.operand, _UNARY)}", _UNARY

    def _Compare(self, node):
        if len(node.ops) != 1:
            raise SyntaxError(f"{self.op.name}: chained comparison {ast.unparse(node)!r}")
        op, p = _CMPOPS[type(node.ops[0])]
        return f"{self.operand(node.left, p)} {op} {self.operand(node.comparators[0], p + 1)}", p

    def _BoolOp(self, node):
        op, p = (" && ", 3) if isinstance(node.op, ast.And) else (" || ", 2)
        return op.join(self.operand(v, p + 1) for v in node.values), p

    def _IfExp(self, node):
        return f"{self.operand(node.test, 2)} ? {self.operand(node.body, 2)} : {self.operand(node.orelse, 1)}", 1

    def _Call(self, node):
        args = [self.text(a) for a in node.args]
        func = node.func
        if isinstance(func, ast.Subscript):                  # a device function with template arguments
            targs = func.slice.elts if isinstance(func.slice, ast.Tuple) else [func.slice]
            return f"{func.value.id}<{', '.join(self.text(t) for t in targs)}>({', '.join(args)})", _ATOM
        name = func.id
        if name in self.types:                               # a cast
            (arg,) = node.args
            return f"({name}){self.operand(arg, _UNARY)}", _UNARY
        if name == "ldg":
            return f"__ldg({self.operand(node.args[0], 10)} + {self.operand(node.args[1], 11)})", _ATOM
        if name == "widen":
            return f"widen<{args[0]}>({args[1]})", _ATOM
        if name == "thread_x":
            return "threadIdx.x", _ATOM
        if name == "sync":
            return "__syncthreads()", _ATOM
        if name not in _FUNCS:
            raise SyntaxError(f"{self.op.name}: unknown function {name}")
        return f"{_FUNCS[name]}({', '.join(args)})", _ATOM

    # ---- statements
    def ctype(self, node) -> str:
        if isinstance(node, ast.Call) and node.func.id == "const":
            return "const " + self.ctype(node.args[0])
        return node.id

    def block(self, stmts, depth: int, brace: bool | None = None) -> list[str]:
        """The statements after a loop / if header: on one line without braces when a single simple statement."""
        if brace is None:
            brace = len(stmts) > 1
        if not brace:
            (line,) = self.stmt(stmts[0], 0)
            return [" " + line]
        out = [" {"]
        for s in stmts:
            first, *rest = self.stmt(s, depth + 1)
            out += [INDENT * (depth + 1) + first, *rest]
        return out + [INDENT * depth + "}"]

    @staticmethod
    def _join(head: str, tail: list[str]) -> list[str]:
        return [head + tail[0], *tail[1:]]

    def stmt(self, node, depth: int) -> list[str]:
        """The lines of one statement (the first without indentation, the rest indented to ``depth``)."""
        method = getattr(self, "_s_" + type(node).__name__, None)
        if method is None:
            raise SyntaxError(f"{self.op.name}: statement {ast.unparse(node)!r} is not in the kernel language")
        return method(node, depth)

    def _s_AnnAssign(self, node, depth):
        return [f"{self.ctype(node.annotation)} {node.target.id} = {self.text(node.value)};"]

    def _s_Assign(self, node, depth):
        (target,) = node.targets
        return [f"{self.text(target)} = {self.text(node.value)};"]

    def _s_AugAssign(self, node, depth):
        return [f"{self.text(node.target)} {_BINOPS[type(node.op)][0]}= {self.text(node.value)};"]

    def _s_Expr(self, node, depth):
        call = node.value
        if isinstance(call.func, ast.Name) and call.func.id == "decl":
            decls = ", ".join(f"{k.arg} = {self.text(k.value)}" for k in call.keywords)
            return [f"{self.ctype(call.args[0])} {decls};"]
        return [self.text(call) + ";"]

    def _s_Return(self, node, depth):
        return [f"return {self.text(node.value)};"]

    def _s_Continue(self, node, depth):
        return ["continue;"]

    def _s_While(self, node, depth):
        return self._join(f"while ({self.text(node.test)})", self.block(node.body, depth))

    def _s_For(self, node, depth):
        var, it = node.target.id, node.iter
        args = [self.text(a) for a in it.args]
        kind = it.func.id
        if kind == "grid":
            head = f"GRID_STRIDE({var}, {args[0]})"
        elif kind == "block_stride":
            head = f"for (int {var} = threadIdx.x; {var} < {args[0]}; {var} += blockDim.x)"
        elif kind == "range":
            lo, hi = (["0", *args] if len(args) == 1 else args)
            head = f"for (int {var} = {lo}; {var} < {hi}; ++{var})"
        else:
            raise SyntaxError(f"{self.op.name}: loop over {kind}")
        return self._join(head, self.block(node.body, depth))

    def _s_If(self, node, depth):
        compound = any(isinstance(s, (ast.For, ast.While, ast.If)) for s in node.body + node.orelse)
        brace = compound or len(node.body) > 1 or len(node.orelse) > 1
        out = self._join(f"if ({self.text(node.test)})", self.block(node.body, depth, brace))
        if node.orelse:
            tail = self.block(node.orelse, depth, brace)
            if brace:
                out[-1] += " else" + tail[0]
                out += tail[1:]
            else:
                out[-1] += " else" + tail[0]
        return out


def _param(p) -> str:
    if not p.pointer:
        return f"{'' if p.kind == 'plain' else 'const '}{p.type} {p.name}"
    const = "const " if p.kind in ("in", "rd") else ""
    restrict = " __restrict__" if p.kind in ("in", "out") else ""
    return f"{const}{p.type}*{restrict} {p.name}"


def print_cuda(op: Fused) -> str:
    """The CUDA C of one description: its comment, template line, signature and body."""
    if "cuda" not in op.backends:
        raise ValueError(f"{op.name} is not a CUDA kernel")
    pr = CudaPrinter(op)
    out = [f"// {line}" for line in op.doc.strip().splitlines()]
    if op.types:
        out.append(f"template<{', '.join('typename ' + t for t in op.types)}>")
    head = f"__device__ __forceinline__ {op.returns}" if op.device else "__global__ void"
    out.append(f"{head} {op.name}({', '.join(_param(p) for p in op.args)}) {{")
    for s in ast.parse(op.source).body:
        first, *rest = pr.stmt(s, 1)
        out += [INDENT + first, *rest]
    return "\n".join(out + ["}"]) + "\n"


def instance_names(op: Fused) -> list[str]:
    """The name expressions of the instantiations CuPy compiles (``name<float>``, ...; the name alone without
    template)."""
    if not op.types:
        return [op.name]
    return [f"{op.name}<{','.join(inst)}>" for inst in op.instances]
