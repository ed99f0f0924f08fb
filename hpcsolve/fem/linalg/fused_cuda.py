"""Print a :class:`hpcsolve.fem.linalg.fused.Fused` description as CUDA C (a ``__global__`` template kernel or a
``__device__ __forceinline__`` function): its body's nodes (``Fused.nodes``) through the code generator's C printer
(``hpcsolve.core.codegen.c``), in this family's layout: a loop or guard of one statement on one line, braces where a
body has more. Parentheses written in the description are kept, so the arithmetic order is the one written there.
"""

from __future__ import annotations

from hpcsolve.core.codegen import nodes as n
from hpcsolve.core.codegen.c import CPrinter
from hpcsolve.fem.linalg.fused import Fused

INDENT = "    "
#: statements whose guard takes braces (one of them in either branch of an if)
_COMPOUND = (n.GridLoop, n.BlockLoop, n.Range, n.While, n.If)


class CudaPrinter(CPrinter):
    """The C printer in the layout of the fused kernels."""

    indent = INDENT

    def visit_While(self, s, depth):
        return self.loop(f"while ({self.expr(s.cond)})", s.body, depth)

    def visit_If(self, s, depth):
        compound = any(isinstance(b, _COMPOUND) for b in s.then + s.orelse)
        brace = compound or len(s.then) > 1 or len(s.orelse) > 1
        out = self.loop(f"if ({self.expr(s.cond)})", s.then, depth, brace)
        if s.orelse:
            first, *rest = self.loop("else", s.orelse, depth, brace)
            out[-1] += " " + first[len(self.pad(depth)):]
            out += rest
        return out


def _param(p) -> str:
    const = "const " if p.const else ""
    if not p.pointer:
        return f"{const}{p.type} {p.name}"
    return f"{const}{p.type}*{' __restrict__' if p.restrict else ''} {p.name}"


def print_cuda(op: Fused) -> str:
    """The CUDA C of one description: its comment, template line, signature and body."""
    if "cuda" not in op.backends:
        raise ValueError(f"{op.name} is not a CUDA kernel")
    out = [f"// {line}" for line in op.doc.strip().splitlines()]
    if op.types:
        out.append(f"template<{', '.join('typename ' + t for t in op.types)}>")
    head = f"__device__ __forceinline__ {op.returns}" if op.device else "__global__ void"
    out.append(f"{head} {op.name}({', '.join(_param(p) for p in op.args)}) {{")
    return "\n".join(out + CudaPrinter().block(op.nodes, 1) + ["}"]) + "\n"


def instance_names(op: Fused) -> list[str]:
    """The name expressions of the instantiations CuPy compiles (``name<float>``, ...; the name alone without
    template)."""
    if not op.types:
        return [op.name]
    return [f"{op.name}<{','.join(inst)}>" for inst in op.instances]
