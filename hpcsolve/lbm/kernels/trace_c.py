"""Tracing ``physics.py`` into straight-line CUDA C (``emit_cuda``): the physics functions are called with symbolic
values that record every ``+ - * /`` as one line of CUDA C, in the order the NumPy reference evaluates them."""

from __future__ import annotations

import re


class Tracer:
    """Records arithmetic on symbolic values as CUDA C statements ``const real_t <prefix>tN = a op b;``."""

    def __init__(self, real_t: str, suffix: str, prefix: str):
        self.real_t = real_t
        self.suffix = suffix          # 'f' for float literals
        self.prefix = prefix          # keeps temporaries of separate traces apart
        self.lines: list[str] = []
        self.count = 0

    def literal(self, value) -> str:
        v = float(value)
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("non-finite constant in physics")
        text = repr(v)                # shortest repr of the (dtype-exact) double: an exact literal
        if "e" not in text and "." not in text:
            text += ".0"
        return f"({text}{self.suffix})"

    def operand(self, value) -> str:
        if isinstance(value, Sym):
            return value.name
        return self.literal(value)

    def emit(self, expr: str) -> "Sym":
        name = f"{self.prefix}t{self.count}"
        self.count += 1
        self.lines.append(f"const {self.real_t} {name} = {expr};")
        return Sym(self, name)


class Sym:
    """A symbolic compute-dtype scalar; NumPy scalars defer to its reflected operators."""

    __array_ufunc__ = None          # np.float32(2) * sym -> sym.__rmul__

    def __init__(self, tracer: Tracer, name: str):
        self.t = tracer
        self.name = name

    def _bin(self, other, op, reflected=False):
        a, b = self.name, self.t.operand(other)
        if reflected:
            a, b = b, a
        return self.t.emit(f"{a} {op} {b}")

    def __add__(self, o): return self._bin(o, "+")
    def __radd__(self, o): return self._bin(o, "+", True)
    def __sub__(self, o): return self._bin(o, "-")
    def __rsub__(self, o): return self._bin(o, "-", True)
    def __mul__(self, o): return self._bin(o, "*")
    def __rmul__(self, o): return self._bin(o, "*", True)
    def __truediv__(self, o): return self._bin(o, "/")
    def __rtruediv__(self, o): return self._bin(o, "/", True)
    def __neg__(self): return self.t.emit(f"-{self.name}")

    def __pow__(self, o):
        if float(o) != 0.5:
            raise ValueError(f"physics traces ** 0.5 only (sqrt), got ** {o}")
        return self.t.emit(f"sqrt({self.name})")
    def __pos__(self): return self


def trace(fn, real_t: str, suffix: str, inputs: dict[str, str], prefix: str):
    """Call ``fn(**symbols)`` on symbolic inputs (keyword -> C variable name); return the recorded
    C statements and the C expressions of its outputs (a tuple or one value). Temporaries no output depends on
    are left out (NVRTC warning 177: declared but never referenced)."""
    tr = Tracer(real_t, suffix, prefix)
    out = fn(**{k: Sym(tr, v) for k, v in inputs.items()})
    outs = [tr.operand(o) for o in (out if isinstance(out, tuple) else (out,))]
    return live_lines(tr.lines, outs), outs


def live_lines(lines: list[str], roots) -> list[str]:
    """The traced statements ``lines`` that the expressions ``roots`` depend on, in their order."""
    live = set(re.findall(r"\w+", " ".join(roots)))
    kept = []
    for line in reversed(lines):
        name, expr = re.match(r"const \w+ (\w+) = (.*);$", line).groups()
        if name in live:
            kept.append(line)
            live.update(re.findall(r"\w+", expr))
    return kept[::-1]
