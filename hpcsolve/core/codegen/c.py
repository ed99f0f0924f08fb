"""The CUDA C printer of the node set (:mod:`hpcsolve.core.codegen.nodes`): one ``visit_<ClassName>`` method per
node type. Kernel expressions and statements print as lines of a kernel body; typed scalar expressions print with
C's precedence (parentheses only where C needs them); a scalar device function (:class:`~.nodes.Fn`) prints as a
``__device__ __forceinline__`` definition. A family's printer subclasses :class:`CPrinter` with its own node types
and its kernel argument kinds (``ARGS``)."""

from __future__ import annotations

from hpcsolve.core.codegen.base import Printer
from hpcsolve.core.codegen.nodes import Bin

#: C types of the scalar types and of the kernel types
C_TYPE = {"f32": "float", "u32": "unsigned int", "i32": "int", "u16": "unsigned short", "i16": "short",
          "index": "long long", "int": "int", "real": "real_t", "double": "double", "bool": "bool",
          "u64": "unsigned long long", "word": "word_t"}
_ARITH = {"*": 3, "+": 4, "-": 4}
_WIDTH = 120            # C lines longer than this are wrapped
_CALLS = {"AsUint": "__float_as_uint", "AsFloat": "__uint_as_float", "Fabs": "fabsf", "Umin": "min"}
#: C precedence of the operator expressions (higher binds tighter)
_BIN = {"+": 10, "-": 10, "*": 11, "/": 11, "//": 11, "%": 11, ">>": 9, "<<": 9, "&": 6, "|": 4, "^": 5}
_CMP = {"<": 8, "<=": 8, ">": 8, ">=": 8, "==": 7, "!=": 7}
_BOOL = {"and": ("&&", 3), "or": ("||", 2)}
_UNARY, _ATOM = 12, 13


class CExpressions(Printer):
    """CUDA C of the node set's expressions (scalar, operator and kernel expressions); ``CPrinter`` adds the
    statements and containers. ``ARGS``: the C parameter types of a family's kernel argument kinds."""

    ARGS: dict = {}
    NAMED = {"zero": "0", "false": "false", "block_x": "blockIdx.x", "block_y": "blockIdx.y",
             "thread_x": "threadIdx.x", "thread": "(long long)blockIdx.x * blockDim.x + threadIdx.x"}

    def launch_qualifier(self) -> str:
        """The qualifier of a kernel with ``bounds`` (a family's printer knows its launch)."""
        return ""

    # typed scalar expressions: ``nested`` is False (a whole expression), True (an operand of an unknown operator)
    # or (parent operator, left operand?)
    def scalar(self, x, parent: str | None = None, left: bool = True) -> str:
        return self.visit(x, False if parent is None else (parent, left))

    def visit_Const(self, x, nested):
        return x.text

    def visit_Ref(self, x, nested):
        return x.name

    def visit_FnCall(self, x, nested):
        return f"{x.fn.name}({', '.join(self.scalar(a) for a in x.args)})"

    def _call(self, x, *args):
        return f"{_CALLS[type(x).__name__]}({', '.join(self.scalar(a) for a in args)})"

    def visit_AsUint(self, x, nested):
        return self._call(x, x.x)

    def visit_AsFloat(self, x, nested):
        return self._call(x, x.x)

    def visit_Fabs(self, x, nested):
        return self._call(x, x.x)

    def visit_Umin(self, x, nested):
        return self._call(x, x.a, x.b)

    def visit_IntCast(self, x, nested):
        return f"({C_TYPE[x.ty]}){self.scalar(x.x, 'cast')}"

    def visit_Select(self, x, nested):
        text = f"{self.scalar(x.cond)} ? {self.scalar(x.a)} : {self.scalar(x.b)}"
        return f"({text})" if nested else text

    def visit_Bin(self, x, nested):
        op = x.sym
        text = f"{self.scalar(x.a, op, True)} {op} {self.scalar(x.b, op, False)}"
        if not nested:
            return text
        parent, left = nested if isinstance(nested, tuple) else (None, False)
        if parent == op and left:
            return text
        if parent in _ARITH and op in _ARITH and (_ARITH[op] < _ARITH[parent]
                                                  or (_ARITH[op] == _ARITH[parent] and left)):
            return text
        return f"({text})"

    # operator expressions: ``nested`` is the precedence the context needs (False: none; True: an atom)
    def wrap(self, text: str, own: int, nested) -> str:
        """``text`` of precedence ``own``, parenthesized where its context needs more."""
        need = 0 if nested is False else (_ATOM if nested is True else nested)
        return f"({text})" if own < need else text

    def visit_BinOp(self, e, nested):
        p = _BIN[e.sym]
        sym = "/" if e.sym == "//" else e.sym
        return self.wrap(f"{self.expr(e.a, p)} {sym} {self.expr(e.b, p + 1)}", p, nested)

    def visit_Compare(self, e, nested):
        p = _CMP[e.sym]
        return self.wrap(f"{self.expr(e.a, p)} {e.sym} {self.expr(e.b, p + 1)}", p, nested)

    def visit_BoolOp(self, e, nested):
        sym, p = _BOOL[e.sym]
        return self.wrap(f" {sym} ".join(self.expr(v, p + 1) for v in e.values), p, nested)

    def visit_Unary(self, e, nested):
        return self.wrap(f"{'!' if e.sym == 'not' else e.sym}{self.expr(e.a, _UNARY)}", _UNARY, nested)

    def visit_Cond(self, e, nested):
        return self.wrap(f"{self.expr(e.test, 2)} ? {self.expr(e.a, 2)} : {self.expr(e.b, 1)}", 1, nested)

    def visit_Paren(self, e, nested):
        text = self.expr(e.value)
        return f"({text})" if nested is not False and nested != 0 else text

    def visit_Index(self, e, nested):
        return f"{self.expr(e.array, _ATOM)}[{self.expr(e.index)}]"

    def visit_ReadOnly(self, e, nested):
        return f"__ldg({self.expr(e.array, 10)} + {self.expr(e.index, 11)})"

    def visit_Widened(self, e, nested):
        return f"widen<{e.type}>({self.expr(e.value)})"

    def visit_Apply(self, e, nested):
        targs = f"<{', '.join(self.expr(t) for t in e.targs)}>" if e.targs else ""
        return f"{e.fn}{targs}({', '.join(self.expr(a) for a in e.args)})"

    # kernel expressions
    def visit_Sel(self, e, nested):
        return self.group(f"({self.expr(e.cond)}) ? {self.expr(e.a)} : {self.expr(e.b)}", nested)

    def visit_Cast(self, e, nested):
        return f"({C_TYPE[e.type]}){self.expr(e.value, True)}"

    def visit_Conv(self, e, nested):
        return f"({C_TYPE.get(e.type, e.type)}){self.expr(e.value, _UNARY)}"

    def visit_At(self, e, nested):
        return f"{e.array}[{self.expr(e.index)}]"



class CPrinter(CExpressions):
    """CUDA C of the node set: its expressions (``CExpressions``), statements and containers (kernels, functions)."""

    def target(self, t) -> str:
        """An assigned name, or an expression (an array element)."""
        return t if isinstance(t, str) else self.expr(t)

    def visit_Let(self, s, depth):
        return [f"{self.pad(depth)}const {C_TYPE.get(s.type, s.type)} {s.name} = {self.expr(s.value)};"]

    def visit_Lets(self, s, depth):
        return [f"{self.pad(depth)}const {self._decls(s)};"]

    def visit_Vars(self, s, depth):
        return [f"{self.pad(depth)}{self._decls(s)};"]

    def _decls(self, s) -> str:
        return f"{C_TYPE.get(s.type, s.type)} " + ", ".join(f"{n} = {self.expr(v)}" for n, v in zip(s.names, s.values))

    def visit_Var(self, s, depth):
        return [f"{self.pad(depth)}{C_TYPE.get(s.type, s.type)} {s.name} = {self.expr(s.value)};"]

    def visit_Update(self, s, depth):
        return [f"{self.pad(depth)}{self.target(s.name)} {s.sym}= {self.expr(s.value)};"]

    def visit_While(self, s, depth):
        return ([f"{self.pad(depth)}while ({self.expr(s.cond)}) {{"] + self.block(s.body, depth + 1)
                + [f"{self.pad(depth)}}}"])

    def visit_Decl(self, s, depth):
        return [f"{self.pad(depth)}{C_TYPE[s.type]} {s.name}" + "".join(f"[{n}]" for n in s.shape) + ";"]

    def visit_Set(self, s, depth):
        return [f"{self.pad(depth)}{self.target(s.target)} = {self.expr(s.value)};"]

    def visit_If(self, s, depth):
        head = f"{self.pad(depth)}if ({self.expr(s.cond)})"
        if s.compact:
            return [head] + self.block(s.then, depth + 1)
        note = f"   // {s.note}" if s.note else ""
        out = [f"{head} {{{note}"] + self.block(s.then, depth + 1)
        if s.orelse:
            out += [f"{self.pad(depth)}}} else {{"] + self.block(s.orelse, depth + 1)
        return out + [f"{self.pad(depth)}}}"]

    def visit_Return(self, s, depth):
        v = s.value
        text = "return" + ("" if v is None else f" {self.expr(v)}") + ";"
        if isinstance(v, Bin) and len(text) + 2 > _WIDTH:     # break a chain a op b op c after its first operand
            first, rest = v, []
            while isinstance(first, Bin) and first.sym == v.sym:
                rest.insert(0, first.b)
                first = first.a
            tail = f" {v.sym} ".join(self.scalar(r, v.sym, False) for r in rest)
            text = f"return {self.scalar(first, v.sym)}\n{' ' * 9}{v.sym} {tail};"
        return [self.pad(depth) + text]

    def visit_Block(self, s, depth):
        return [f"{self.pad(depth)}{{"] + self.block(s.body, depth + 1) + [f"{self.pad(depth)}}}"]

    def visit_Unrolled(self, s, depth):
        if s.compact:
            (line,) = self.block(s.body, 0)
            return ["#pragma unroll", f"{self.pad(depth)}for (int {s.var} = 0; {s.var} < {s.n}; ++{s.var}) {line}"]
        return (["#pragma unroll", f"{self.pad(depth)}for (int {s.var} = 0; {s.var} < {s.n}; ++{s.var}) {{"]
                + self.block(s.body, depth + 1) + [f"{self.pad(depth)}}}"])

    def loop(self, head: str, body, depth: int, brace: bool | None = None) -> list[str]:
        """A loop or guard ``head`` and its ``body``: one statement on the line of the head (no braces) unless
        ``brace`` (default: more than one statement)."""
        if brace is None:
            brace = len(body) > 1
        if not brace:
            (line,) = self.visit(body[0], 0)
            return [f"{self.pad(depth)}{head} {line}"]
        return [f"{self.pad(depth)}{head} {{"] + self.block(body, depth + 1) + [f"{self.pad(depth)}}}"]

    def visit_GridLoop(self, s, depth):          # GRID_STRIDE: the runtime's grid-stride loop macro
        return self.loop(f"GRID_STRIDE({s.var}, {self.expr(s.n)})", s.body, depth)

    def visit_BlockLoop(self, s, depth):
        v = s.var
        return self.loop(f"for (int {v} = threadIdx.x; {v} < {self.expr(s.n)}; {v} += blockDim.x)", s.body, depth)

    def visit_Range(self, s, depth):
        v, lo = s.var, "0" if s.lo is None else self.expr(s.lo)
        return self.loop(f"for (int {v} = {lo}; {v} < {self.expr(s.hi)}; ++{v})", s.body, depth)

    def visit_Continue(self, s, depth):
        return [f"{self.pad(depth)}continue;"]

    def visit_Barrier(self, s, depth):
        return [f"{self.pad(depth)}__syncthreads();"]

    def visit_Call(self, s, depth):
        args = [self.expr(a) for a in s.args] + ([s.out] if s.out else [])
        return [f"{self.pad(depth)}{s.fn}({', '.join(args)});"]

    # containers
    def visit_Kernel(self, k):
        args = ", ".join(f"{self.ARGS[kind]} {name}" for name, kind in k.args)
        head = 'extern "C" __global__ void ' + (self.launch_qualifier() + "\n" if k.bounds else "")
        views = [f"  {'const ' if kind == 'words_in' else ''}word_t* __restrict__ {name} = "
                 f"reinterpret_cast<{'const ' if kind == 'words_in' else ''}word_t*>({array});"
                 for name, array, kind in k.views]
        return (["", *(f"// {line}" for line in k.doc.splitlines()), f"{head}{k.name}({args}) {{"]
                + views + self.block(k.body, 1) + ["}"])

    def visit_Function(self, f):
        args = ([f"{self.ARGS[kind]} {name}" for name, kind in f.args] + [f"{C_TYPE[r[1]]}* {r[0]}" for r in f.returns]
                + ([f"real_t* {f.out_array[0]}"] if f.out_array else []))
        inline = "__forceinline__ " if f.inline else ""
        body = self.block(f.body, 1)          # binds the names the outputs are written from
        outs = [f"  {' '.join(f'*{r[0]} = {self.expr(self.returned(r))};' for r in f.returns)}"] if f.returns else []
        result = C_TYPE[f.result] if f.result else "void"
        return ([f"// {line}" for line in f.doc.splitlines()]
                + [f"__device__ {inline}{result} {f.name}({', '.join(args)}) {{"] + body + outs + ["}"])

    def visit_Fn(self, fn) -> str:
        """The CUDA C ``__device__ __forceinline__`` definition of a scalar function, its comment lines first."""
        head = f"__device__ __forceinline__ {C_TYPE[fn.ret]} {fn.name}("
        params = [f"const {C_TYPE[t]} {n}" for n, t in fn.params]
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
        body = [" ".join("\n".join(self.visit(s, 0)) for s in line) for line in fn.body]
        if fn.one_line:
            return f"{comment}{sig} {' '.join(body)} }}\n"
        return comment + sig + "\n" + "".join(f"  {line}\n" for line in body) + "}\n"


def c_source(fns) -> str:
    """The C definitions of the scalar functions ``fns``, in order."""
    printer = CPrinter()
    return "".join(printer.visit(fn) for fn in fns)


def c_expr(x) -> str:
    """The C of one scalar expression."""
    return CPrinter().scalar(x)
