"""The Numba printer of the node set (:mod:`hpcsolve.core.codegen.nodes`): Python source for ``numba.cuda.jit``,
one ``visit_<ClassName>`` method per node type. Device arrays are read through ``load_at`` (no negative-index
wraparound); an unrolled loop is written out (``name[k]`` of a per-cell array becomes the local ``name_<k>``); a
device function that fills an array gives its entries back as a tuple. The typed scalar nodes reach Numba as LLVM
IR (:mod:`hpcsolve.core.codegen.llvm`). A family's printer subclasses :class:`PythonPrinter` with its own node
types."""

from __future__ import annotations

import re

from hpcsolve.core.codegen.base import Printer

#: Numba's conversion functions of the kernel types (``Conv``; a type parameter converts by its own name)
CONV = {"int": "int64", "u64": "uint64", "double": "float64", "float": "float32"}
#: Python's spelling of the math functions (``Apply``)
MATH = {"fmax": "max", "fabs": "abs", "isfinite": "math.isfinite"}
#: Python's precedence of the operator expressions (``ast.unparse``'s: higher binds tighter)
_TEST, _OR, _AND, _NOT, _CMP, _FACTOR, _ATOM = 3, 4, 5, 6, 7, 14, 17
_BIN = {"|": 8, "^": 9, "&": 10, "<<": 11, ">>": 11, "+": 12, "-": 12, "*": 13, "/": 13, "//": 13, "%": 13}


class PythonPrinter(Printer):
    """Python of the node set; ``VIEWED``: the argument kinds a kernel's word views follow."""

    indent = "    "
    NAMED = {"zero": "ZERO", "false": "False", "block_x": "cuda.blockIdx.x", "block_y": "cuda.blockIdx.y",
             "thread_x": "cuda.threadIdx.x", "thread": "cuda.grid(1)"}
    AND, IDIV, NOT = "and", "//", "not "
    VIEWED: tuple = ()

    def __init__(self):
        self.unroll: dict[str, int] = {}
        self.out_array = ""           # the array a device function fills: name[j] is the local name_j

    def name(self, text):
        for var, k in self.unroll.items():
            text = re.sub(rf"\b(\w+)\[{var}\]", rf"\g<1>_{k}", text)
            text = re.sub(rf"\b{var}\b", str(k), text)
        if self.out_array:
            text = re.sub(rf"\b{self.out_array}\[(\d+)\]", rf"{self.out_array}_\1", text)
        return text

    # expressions
    def visit_Sel(self, e, nested):
        return self.group(f"{self.expr(e.a)} if {self.expr(e.cond)} else {self.expr(e.b)}", nested)

    def visit_Cast(self, e, nested):       # the value, grouped as the C cast groups it
        return self.expr(e.value, True)

    def visit_Conv(self, e, nested):
        return f"{CONV.get(e.type, e.type)}({self.expr(e.value)})"

    # operator expressions: ``nested`` is the precedence the context needs (False: none; True: an atom)
    def wrap(self, text: str, own: int, nested) -> str:
        """``text`` of precedence ``own``, parenthesized where its context needs more."""
        need = 0 if nested is False else (_ATOM if nested is True else nested)
        return f"({text})" if own < need else text

    def visit_BinOp(self, e, nested):
        p = _BIN[e.sym]
        return self.wrap(f"{self.expr(e.a, p)} {e.sym} {self.expr(e.b, p + 1)}", p, nested)

    def visit_Compare(self, e, nested):
        return self.wrap(f"{self.expr(e.a, _CMP + 1)} {e.sym} {self.expr(e.b, _CMP + 1)}", _CMP, nested)

    def visit_BoolOp(self, e, nested):
        p = _AND if e.sym == "and" else _OR        # (each further operand one level tighter, as ast.unparse)
        return self.wrap(f" {e.sym} ".join(self.expr(v, p + 1 + k) for k, v in enumerate(e.values)), p, nested)

    def visit_Unary(self, e, nested):
        if e.sym == "not":
            return self.wrap(f"not {self.expr(e.a, _NOT)}", _NOT, nested)
        return self.wrap(f"{e.sym}{self.expr(e.a, _FACTOR)}", _FACTOR, nested)

    def visit_Cond(self, e, nested):
        text = f"{self.expr(e.a, _TEST + 1)} if {self.expr(e.test, _TEST + 1)} else {self.expr(e.b, _TEST)}"
        return self.wrap(text, _TEST, nested)

    def visit_Paren(self, e, nested):           # Python's parentheses follow its precedence
        return self.expr(e.value, nested)

    def visit_Index(self, e, nested):
        return f"{self.expr(e.array, _ATOM)}[{self.expr(e.index)}]"

    def visit_ReadOnly(self, e, nested):
        return self.visit_Index(e, nested)

    def visit_Widened(self, e, nested):
        return f"{CONV.get(e.type, e.type)}({self.expr(e.value)})"

    def visit_Apply(self, e, nested):
        return f"{MATH.get(e.fn, e.fn)}({', '.join(self.expr(a) for a in e.args)})"

    def visit_At(self, e, nested):
        return f"load_at({e.array}, {self.expr(e.index)})"

    # statements
    def visit_Let(self, s, depth):
        return [f"{self.pad(depth)}{s.name} = {self.expr(s.value)}"]

    def visit_Lets(self, s, depth):
        return [f"{self.pad(depth)}{n} = {self.expr(v)}" for n, v in zip(s.names, s.values)]

    def visit_Var(self, s, depth):
        return self.visit_Let(s, depth)

    def visit_Vars(self, s, depth):
        return self.visit_Lets(s, depth)

    def target(self, t) -> str:
        """An assigned name, or an expression (an array element)."""
        return self.name(t) if isinstance(t, str) else self.expr(t)

    def visit_Update(self, s, depth):
        return [f"{self.pad(depth)}{self.target(s.name)} {s.sym}= {self.expr(s.value)}"]

    def visit_While(self, s, depth):
        return [f"{self.pad(depth)}while {self.expr(s.cond)}:"] + self.block(s.body, depth + 1)

    def visit_Decl(self, s, depth):       # a per-cell array that needs a value on every path: one local per cell
        if s.init is None:
            return []
        return [f"{self.pad(depth)}{s.name}_{k} = {self.expr(s.init)}" for k in range(s.shape[0])]

    def visit_Set(self, s, depth):
        return [f"{self.pad(depth)}{self.target(s.target)} = {self.expr(s.value)}"]

    def visit_If(self, s, depth):
        note = f"   # {s.note}" if s.note else ""
        out = [f"{self.pad(depth)}if {self.expr(s.cond)}:{note}"] + self.block(s.then, depth + 1)
        if s.orelse:
            out += [f"{self.pad(depth)}else:"] + self.block(s.orelse, depth + 1)
        return out

    def visit_Return(self, s, depth):
        return [f"{self.pad(depth)}return" + ("" if s.value is None else f" {self.expr(s.value)}")]

    def visit_Block(self, s, depth):
        return self.block(s.body, depth)

    def visit_Unrolled(self, s, depth):
        out = []
        for k in range(s.n):
            self.unroll[s.var] = k
            out += self.block(s.body, depth)
        del self.unroll[s.var]
        return out

    def strided(self, var: str, start: str, bound, step: str, body, depth: int) -> list[str]:
        """``var = start; while var < bound: body; var += step``."""
        pad = self.pad(depth)
        return ([f"{pad}{var} = {start}", f"{pad}while {var} < {self.expr(bound, _CMP + 1)}:"]
                + self.block(body, depth + 1) + [f"{self.pad(depth + 1)}{var} += {step}"])

    def visit_GridLoop(self, s, depth):
        return self.strided(s.var, "cuda.grid(1)", s.n, "cuda.gridsize(1)", s.body, depth)

    def visit_BlockLoop(self, s, depth):
        return self.strided(s.var, "cuda.threadIdx.x", s.n, "cuda.blockDim.x", s.body, depth)

    def visit_Range(self, s, depth):
        bounds = ", ".join(self.expr(b) for b in (s.lo, s.hi) if b is not None)
        return [f"{self.pad(depth)}for {s.var} in range({bounds}):"] + self.block(s.body, depth + 1)

    def visit_Continue(self, s, depth):
        return [f"{self.pad(depth)}continue"]

    def visit_Barrier(self, s, depth):
        return [f"{self.pad(depth)}cuda.syncthreads()"]

    def visit_Call(self, s, depth):
        call = f"{s.fn}({', '.join(self.expr(a) for a in s.args)})"
        return [f"{self.pad(depth)}{self.name(s.out)} = {call}" if s.out else self.pad(depth) + call]

    # containers
    def visit_Kernel(self, k):
        names = [name for name, _ in k.args]
        arrays = max((j + 1 for j, (_, kind) in enumerate(k.args) if kind in self.VIEWED), default=0)
        names[arrays:arrays] = [name for name, _, _ in k.views]       # the word views follow the arrays
        return ([f"def {k.name}({', '.join(names)}):"]
                + [f"    # {line}" for line in k.doc.splitlines()] + self.block(k.body, 1))

    def visit_Function(self, f):
        outs = [f"    return {', '.join(self.expr(self.returned(r)) for r in f.returns)}"] if f.returns else []
        if f.out_array:
            name, n = f.out_array
            outs = [f"    return ({', '.join(f'{name}_{j}' for j in range(n))})"]
        self.out_array = f.out_array[0] if f.out_array else ""
        body = self.block(f.body, 1)
        self.out_array = ""
        return ([f"def {f.name}({', '.join(name for name, _ in f.args)}):"]
                + [f"    # {line}" for line in f.doc.splitlines()] + body + outs)
