"""Dispatch by node type, shared by every printer: ``visit(node, ...)`` calls the printer's ``visit_<ClassName>``;
a node type the printer has no method for is a :class:`UnknownNode` error naming both."""

from __future__ import annotations


class UnknownNode(TypeError):
    """A printer met a node type it has no method for."""


class Visitor:
    """One method per node type: ``visit_<ClassName>(node, *context)``."""

    def visit(self, node, *args):
        method = getattr(self, "visit_" + type(node).__name__, None)
        if method is None:
            return self.unknown(node)
        return method(node, *args)

    def unknown(self, node):
        """A node of a type this printer has no method for: an error naming both (a printer of a language that
        users write may raise its own)."""
        raise UnknownNode(f"{type(self).__name__} cannot print a {type(node).__module__}.{type(node).__name__} "
                          f"node: it has no method visit_{type(node).__name__}")
