"""The import graph of hpcsolve, read from the source with ``ast`` (nothing is imported): used by
tests/test_architecture.py and by ``python tests/arch_util.py`` (prints the graph's circles, late imports and
upward arrows)."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "hpcsolve"


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


@dataclass
class Edge:
    src: str
    dst: str
    line: int
    late: bool            # inside a function (or class body): imported when called
    comment: str = ""     # the source line's trailing comment


@dataclass
class Graph:
    mods: dict[str, Path]
    edges: list[Edge] = field(default_factory=list)

    def arrows(self, late: bool = True) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {m: set() for m in self.mods}
        for e in self.edges:
            if e.src != e.dst and (late or not e.late):
                out[e.src].add(e.dst)
        return out

    def circles(self, late: bool = True) -> list[list[str]]:
        """Strongly connected components with more than one module (Tarjan)."""
        g = self.arrows(late)
        index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

        def visit(v):
            index[v] = low[v] = n[0]
            n[0] += 1
            stack.append(v)
            on.add(v)
            for w in sorted(g[v]):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))

        sys.setrecursionlimit(10000)
        for v in sorted(g):
            if v not in index:
                visit(v)
        return comps


def _resolve(mods, src: str, node) -> list[str]:
    """The hpcsolve modules an import statement names (a package's __init__ counts as the package)."""
    names = []
    if isinstance(node, ast.Import):
        for a in node.names:
            if a.name.startswith("hpcsolve"):
                names.append(a.name)
        return [_longest(mods, n) for n in names if _longest(mods, n)]
    base = node.module or ""
    if node.level:
        pkg = src.split(".")
        if not mods[src].name == "__init__.py":
            pkg = pkg[:-1]
        pkg = pkg[:len(pkg) - node.level + 1]
        base = ".".join(pkg + ([base] if base else []))
    if not base.startswith("hpcsolve"):
        return []
    out = []
    for a in node.names:
        full = f"{base}.{a.name}"
        out.append(full if full in mods else _longest(mods, base))
    return [o for o in out if o]


def _longest(mods, name: str) -> str | None:
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in mods:
            return cand
        parts.pop()
    return None


def graph() -> Graph:
    mods = modules()
    g = Graph(mods)
    for name, path in mods.items():
        text = path.read_text()
        lines = text.splitlines()
        tree = ast.parse(text)
        top = set()
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                top.add(id(node))
            elif isinstance(node, ast.If):          # if TYPE_CHECKING / try-imports at module level
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        top.add(id(sub))
            elif isinstance(node, ast.Try):
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        top.add(id(sub))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                line = lines[node.lineno - 1]
                comment = line.split("#", 1)[1].strip() if "#" in line else ""
                for dst in _resolve(mods, name, node):
                    g.edges.append(Edge(name, dst, node.lineno, id(node) not in top, comment))
    return g


if __name__ == "__main__":
    g = graph()
    print(f"{len(g.mods)} modules, {len({(e.src, e.dst) for e in g.edges if e.src != e.dst})} arrows")
    for c in g.circles():
        print("circle:", " ".join(c))
    late = [e for e in g.edges if e.late]
    print(f"{len(late)} late imports of hpcsolve modules")
    for e in late:
        print(f"  {e.src}:{e.line} -> {e.dst}   # {e.comment}")


#: the layers, lowest first: a module may import its own layer and those below (a family not the other family)
LAYERS = (("hpcsolve.core",), ("hpcsolve.lbm", "hpcsolve.fem"), ("hpcsolve.report", "hpcsolve.run"),
          ("hpcsolve.cli", "hpcsolve"))


def layer_of(mod: str) -> tuple[int, str]:
    """(layer index, room) of a module: the room is the longest LAYERS prefix it is under."""
    best = None
    for i, rooms in enumerate(LAYERS):
        for room in rooms:
            if mod == room or mod.startswith(room + "."):
                if best is None or len(room) > len(best[1]):
                    best = (i, room)
    return best


def upward(g: Graph) -> list[Edge]:
    """Imports that point up a layer, or across from one family to the other."""
    out = []
    for e in g.edges:
        (ls, rs), (ld, rd) = layer_of(e.src), layer_of(e.dst)
        if ld > ls or (ld == ls == 1 and rs != rd):
            out.append(e)
    return out


def print_upward():
    for e in upward(graph()):
        print(f"up: {e.src}:{e.line} -> {e.dst}  # {e.comment}")
