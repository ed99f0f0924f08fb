"""The shared part of the kernel plan's two printers (``emit_cuda.CPrinter``, ``emit_numba.PythonPrinter``): the walk
over a kernel body of ``kernel_plan`` statements and expressions. A language's printer supplies only its syntax: one
method per node (``let``, ``if_``, ``sel``, ...) and its spelling of the named values."""

from __future__ import annotations

from hpcsolve.lbm.kernels import kernel_plan as kp


class Printer:
    """Prints a ``kernel_plan.Kernel`` or a statement list as lines of one language."""

    indent = "  "
    #: the language's spelling of the ``kernel_plan.Named`` values and of the operators of ``And``, ``IDiv``, ``Not``
    NAMED: dict = {}
    AND, IDIV, NOT = "&&", "/", "!"

    # expressions ------------------------------------------------------------------------------
    def expr(self, e, nested: bool = False) -> str:
        """The text of expression ``e``; ``nested``: an operand of a tighter operator (parenthesized if compound)."""
        if isinstance(e, str):
            return self.name(e) if not nested or e.isidentifier() or e.isdigit() else f"({self.name(e)})"
        if isinstance(e, (int, float)):
            return str(e)
        if isinstance(e, kp.Fmt):
            text = self.name(e.text).format(*(self.expr(a) for a in e.args))
            return f"({text})" if nested else text
        method = {kp.Sel: self.sel, kp.Cast: self.cast, kp.Pop: self.pop, kp.At: self.at, kp.Named: self.named,
                  kp.IDiv: self.idiv, kp.Conv: self.conv,
                  kp.And: self.and_, kp.Not: self.not_}[type(e)]
        return method(e, nested)

    @staticmethod
    def group(text: str, nested: bool) -> str:
        """``text`` parenthesized where it is the operand of a tighter operator."""
        return f"({text})" if nested else text

    def named(self, e, nested):
        return self.NAMED[e.name]

    def and_(self, e, nested):
        return self.group(f"{self.expr(e.a)} {self.AND} {self.expr(e.b)}", nested)

    def idiv(self, e, nested):
        return self.group(f"{self.expr(e.a, True)} {self.IDIV} {self.expr(e.b, True)}", nested)

    def not_(self, e, nested):
        return self.group(f"{self.NOT}{self.expr(e.a, True)}", nested)

    def name(self, text: str) -> str:
        """A string expression as this language writes it (a value the printer has bound under that name)."""
        return text

    # statements -------------------------------------------------------------------------------
    def block(self, body, depth: int) -> list[str]:
        """The lines of the statements ``body`` at indentation ``depth``."""
        out = []
        for stmt in body:
            method = getattr(self, _METHODS[type(stmt)])
            out += method(stmt, depth)
        return out

    def pad(self, depth: int) -> str:
        return self.indent * depth

    def kernel_text(self, kernel) -> str:
        """The kernel's text: its signature and body."""
        return "\n".join(self.kernel(kernel)) + "\n"

    @staticmethod
    def returned(ret) -> str:
        """The value a device function's output ``(name, type[, value])`` gives back (``value``, else ``name``)."""
        return ret[2] if len(ret) > 2 else ret[0]

    def function_text(self, fn) -> str:
        """A device function's text (``kernel_plan.Function``)."""
        return "\n".join(self.function(fn)) + "\n"


_METHODS = {kp.Let: "let", kp.Var: "var", kp.While: "while_", kp.Decl: "decl", kp.Set: "set_", kp.If: "if_",
            kp.Return: "return_", kp.Block: "scope",
            kp.Unrolled: "unrolled", kp.Call: "call", kp.Physics: "physics", kp.Collide: "collide",
            kp.StoreStep: "store_step", kp.Seed: "seed", kp.CollideStore: "collide_store", kp.Piece: "piece",
            kp.PairExchange: "pair_exchange", kp.PairHalves: "pair_halves", kp.PairFlags: "pair_flags",
            kp.PairStores: "pair_stores"}
