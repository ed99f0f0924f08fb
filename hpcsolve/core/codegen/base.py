"""What the CUDA C and the Numba printers share: the walk over a kernel body (statements, expressions given as
strings or nodes) and the text of a kernel or device function. A language's printer supplies its syntax: one
``visit_<ClassName>`` method per node type and its spelling of the :class:`~hpcsolve.core.codegen.nodes.Named`
values."""

from __future__ import annotations

from hpcsolve.core.codegen.printer import Visitor


class Printer(Visitor):
    """Prints a :class:`~hpcsolve.core.codegen.nodes.Kernel`, a ``Function`` or a statement list as lines."""

    indent = "  "
    #: the language's spelling of the ``Named`` values and of the operators of ``And``, ``IDiv``, ``Not``
    NAMED: dict = {}
    AND, IDIV, NOT = "&&", "/", "!"

    # expressions ------------------------------------------------------------------------------
    def expr(self, e, nested=False) -> str:
        """The text of expression ``e``; ``nested``: an operand of a tighter operator (parenthesized if compound)."""
        if isinstance(e, str):
            return self.name(e) if not nested or e.isidentifier() or e.isdigit() else f"({self.name(e)})"
        if isinstance(e, (int, float)):
            return str(e)
        return self.visit(e, nested)

    @staticmethod
    def group(text: str, nested) -> str:
        """``text`` parenthesized where it is the operand of a tighter operator."""
        return f"({text})" if nested else text

    def visit_Fmt(self, e, nested):
        text = self.name(e.text).format(*(self.expr(a) for a in e.args))
        return f"({text})" if nested else text

    def visit_Named(self, e, nested):
        return self.NAMED[e.name]

    def visit_And(self, e, nested):
        return self.group(f"{self.expr(e.a)} {self.AND} {self.expr(e.b)}", nested)

    def visit_IDiv(self, e, nested):
        return self.group(f"{self.expr(e.a, True)} {self.IDIV} {self.expr(e.b, True)}", nested)

    def visit_Not(self, e, nested):
        return self.group(f"{self.NOT}{self.expr(e.a, True)}", nested)

    def name(self, text: str) -> str:
        """A string expression as this language writes it (a value the printer has bound under that name)."""
        return text

    # statements -------------------------------------------------------------------------------
    def block(self, body, depth: int) -> list[str]:
        """The lines of the statements ``body`` at indentation ``depth``."""
        out = []
        for stmt in body:
            out += self.visit(stmt, depth)
        return out

    def pad(self, depth: int) -> str:
        return self.indent * depth

    def kernel_text(self, kernel) -> str:
        """The kernel's text: its signature and body."""
        return "\n".join(self.visit(kernel)) + "\n"

    @staticmethod
    def returned(ret) -> str:
        """The value a device function's output ``(name, type[, value])`` gives back (``value``, else ``name``)."""
        return ret[2] if len(ret) > 2 else ret[0]

    def function_text(self, fn) -> str:
        """A device function's text (:class:`~hpcsolve.core.codegen.nodes.Function`)."""
        return "\n".join(self.visit(fn)) + "\n"
