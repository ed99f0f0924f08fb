"""The architecture of docs/design/architecture.md, kept by the code: no import circles, layers that import only
downward, no backend-name or codec-name comparisons outside the registries, rooms of bounded size, and a
document that names only what exists. The import graph is read from the source (tests/arch_util.py)."""

from __future__ import annotations

import ast
import re
import tomllib

import arch_util
from hpcsolve.core.backends import BACKENDS
from hpcsolve.core.precision import POLICIES
from hpcsolve.core.version import __version__

GRAPH = arch_util.graph()
#: the registries: where backend names stand beside what each backend provides
REGISTRIES = {"hpcsolve.core.backends", "hpcsolve.lbm.steppers", "hpcsolve.fem.linalg"}
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
#: a longer function says why in its docstring, in a sentence that starts with this
LONG_REASON = "Long because"


def _trees():
    for name, path in GRAPH.mods.items():
        yield name, path, ast.parse(path.read_text())


def test_no_import_circles():
    """Every import counts, at module level and inside functions (a late import only hides a circle)."""
    assert GRAPH.circles() == []


def test_layers_import_downward():
    """core knows no family, the families (lbm, fem) import core and not each other, report/run sit above them;
    at most two arrows point up, each with a comment on its line saying why."""
    up = arch_util.upward(GRAPH)
    assert len(up) <= 2, [f"{e.src}:{e.line} -> {e.dst}" for e in up]
    assert all(e.comment for e in up), [f"{e.src}:{e.line} -> {e.dst}" for e in up if not e.comment]


def _name_comparisons(names: set[str]) -> list[str]:
    found = []
    for mod, _, tree in _trees():
        if mod in REGISTRIES:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            for side in [node.left, *node.comparators]:
                consts = [side] if isinstance(side, ast.Constant) else (
                    list(side.elts) if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [])
                if any(isinstance(c, ast.Constant) and c.value in names for c in consts):
                    found.append(f"{mod}:{node.lineno}")
    return found


def test_no_backend_name_comparisons_outside_the_registries():
    """Code asks the Backend object (or the low ops' capabilities), it never compares a backend's name."""
    assert _name_comparisons(set(BACKENDS)) == []


def test_no_codec_name_comparisons():
    """A storage codec is an object the precision chose once (``policy.codec``): it is asked, its name is not
    compared (the 16-bit formats' names; "fp64"/"fp32" also name solver options, so they are not searched)."""
    names = {name for name in POLICIES if name.startswith("fp16")}
    assert names == {"fp16s", "fp16c"}
    assert _name_comparisons(names) == []


def test_rooms_are_small():
    big = {m: n for m, p in GRAPH.mods.items() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert big == {}


def test_long_functions_say_why():
    long = []
    for mod, _, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES and LONG_REASON not in (ast.get_docstring(node) or ""):
                    long.append(f"{mod}.{node.name} ({n} lines)")
    assert long == []


def test_late_imports_of_hpcsolve_modules_say_why():
    """Imports sit at the module top; one inside a function says why on its line (an optional dependency behind
    it, a measured start-up cost, a registry loaded on demand)."""
    silent = [f"{e.src}:{e.line} -> {e.dst}" for e in GRAPH.edges if e.late and not e.comment]
    assert silent == []


def test_architecture_document_names_only_what_exists():
    text = (arch_util.ROOT / "docs" / "design" / "architecture.md").read_text()
    paths = set(re.findall(r"\bhpcsolve/[\w/]+\.py\b", text))
    modules = set(re.findall(r"\bhpcsolve(?:\.[a-z_0-9]+)+", text))
    assert paths and modules
    missing = sorted(p for p in paths if not (arch_util.ROOT / p).exists())
    missing += sorted(m for m in modules if m not in GRAPH.mods and not any(m.startswith(x + ".") for x in GRAPH.mods))
    assert missing == []
    page_dir = (arch_util.ROOT / "docs" / "design").resolve()
    outside = [t for t in re.findall(r"\]\(([^)#\s]+)[^)]*\)", text) if not re.match(r"[a-z]+:", t)
               and (t.startswith("/") or not (page_dir / t).resolve().is_relative_to(arch_util.ROOT.resolve()))]
    assert outside == [], outside      # links that leave the repository


def test_version_is_the_projects():
    meta = tomllib.loads((arch_util.ROOT / "pyproject.toml").read_text())
    assert meta["project"]["version"] == __version__


def test_core_imports_no_family():
    """The ground floor imports nothing from hpcsolve.lbm, hpcsolve.fem, hpcsolve.report (arrows, late ones too)."""
    bad = [f"{e.src}:{e.line} -> {e.dst}" for e in GRAPH.edges
           if e.src.startswith("hpcsolve.core") and not e.dst.startswith("hpcsolve.core")]
    assert bad == []
