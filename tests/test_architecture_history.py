"""A code base free of its own history (issue 53), kept by the code: every import inside a function says why on its
line (``# late: ...``), no class over 250 lines, no sub-package that imports a sibling which imports it back (or one
a layer up), and no measurement logs in comments (their figures live in docs/measured, a one-line why stays).

Each test lists every offender (file:line and the text), so that one run says what is left to do."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import defaultdict
from pathlib import Path

import arch_util

GRAPH = arch_util.graph()
MAX_CLASS_LINES = 250
#: the reason comment an import inside a function carries on its line
LATE = "# late:"


def _sources():
    for name, path in GRAPH.mods.items():
        text = path.read_text()
        yield name, path, text, ast.parse(text)


def _where(path: Path, line: int) -> str:
    return f"{path.relative_to(arch_util.ROOT)}:{line}"


def late_imports_without_reason() -> list[str]:
    """``file:line: import ...`` of every import inside a function (or a method) whose lines carry no ``# late:``."""
    found = []
    for _, path, text, tree in _sources():
        lines = text.splitlines()
        seen = set()
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and node.lineno not in seen:
                    seen.add(node.lineno)
                    span = lines[node.lineno - 1:node.end_lineno]
                    if not any(LATE in line for line in span):
                        found.append(f"{_where(path, node.lineno)}: {span[0].strip()}")
    return sorted(found)


def test_every_function_level_import_says_why():
    """Imports sit at the top of the module; one inside a function carries ``# late: <reason>`` on its line (an
    optional GPU module, a measured start-up cost, a cycle it avoids)."""
    silent = late_imports_without_reason()
    assert silent == [], f"{len(silent)} function-level imports without '{LATE} <reason>':\n" + "\n".join(silent)


def big_classes() -> list[str]:
    found = []
    for _, path, _, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and (n := node.end_lineno - node.lineno + 1) > MAX_CLASS_LINES:
                found.append(f"{_where(path, node.lineno)}: class {node.name} ({n} lines)")
    return found


def test_no_class_over_250_lines():
    big = big_classes()
    assert big == [], f"classes over {MAX_CLASS_LINES} lines:\n" + "\n".join(big)


def folder_of(module: str) -> str:
    """The package folder a module lives in (a package's ``__init__`` is its own folder)."""
    path = GRAPH.mods[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _related(a: str, b: str) -> bool:
    """One folder holds the other (hpcsolve.lbm and hpcsolve.lbm.boundaries): a family's runner above its rooms and
    its shared physics below them live in the same folder, so parent and child are not compared."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def folder_arrows() -> dict[tuple[str, str], list[str]]:
    """(source folder, destination folder) -> the imports behind the arrow (``module:line -> module``)."""
    arrows = defaultdict(list)
    for e in GRAPH.edges:
        src, dst = folder_of(e.src), folder_of(e.dst)
        if not _related(src, dst):
            arrows[(src, dst)].append(f"{e.src}:{e.line} -> {e.dst}")
    return arrows


def mutual_folders() -> list[str]:
    arrows = folder_arrows()
    found = []
    for (a, b), there in sorted(arrows.items()):
        back = arrows.get((b, a))
        if back and a < b:
            found.append(f"{a} <-> {b}: {len(there)} imports one way ({there[0]}, ...), {len(back)} the other "
                         f"({back[0]}, ...)")
    return found


def test_no_mutual_imports_between_sub_packages():
    """Folder level: lbm/boundaries may import lbm/kernels or the reverse, not both (late imports count)."""
    mutual = mutual_folders()
    assert mutual == [], "sub-packages that import each other:\n" + "\n".join(mutual)


def test_no_upward_imports_between_sub_packages():
    """Folder level: no folder imports one of a higher layer, nor a family the other (tests/arch_util.LAYERS)."""
    up = sorted({f"{folder_of(e.src)} -> {folder_of(e.dst)} ({e.src}:{e.line})" for e in arch_util.upward(GRAPH)
                 if not _related(folder_of(e.src), folder_of(e.dst))})
    assert up == [], "folders importing upward:\n" + "\n".join(up)


#: a figure: an integer or decimal, with thousands separators (28,271; 1,326.6), not part of a name (fp16, 2D, 8192^2)
FIGURE = re.compile(r"(?<![\w.^])\d[\d,]*(?:\.\d+)?(?![\w^])")
#: what a measurement names: throughput, bandwidth, times per step, before -> after, the machine, the date
MEASURED = re.compile(r"MLUPS|GB/s|\bus\b|\bms\b|\d\s*->\s*\d|\bH[12]00\b|\d{4}-\d{2}-\d{2}")
#: a log: a block of comment lines of which at least this many carry FIGURES_PER_LINE figures or more
LOG_LINES = 3
FIGURES_PER_LINE = 3


def _comment_blocks(text: str):
    """Runs of consecutive whole-line comments, as [(line number, comment text)]."""
    block, last = [], None
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.COMMENT or tok.line.strip() != tok.string.strip():
            continue
        if last is not None and tok.start[0] != last + 1 and block:
            yield block
            block = []
        block.append((tok.start[0], tok.string))
        last = tok.start[0]
    if block:
        yield block


def measurement_logs() -> list[str]:
    """``file:first-last`` of every comment block that reads as a benchmark log: LOG_LINES or more lines dense with
    figures, and something measured named in the block."""
    found = []
    for _, path, text, _ in _sources():
        for block in _comment_blocks(text):
            dense = [line for line, c in block if len(FIGURE.findall(c)) >= FIGURES_PER_LINE]
            if len(dense) >= LOG_LINES and MEASURED.search(" ".join(c for _, c in block)):
                found.append(f"{_where(path, block[0][0])}-{block[-1][0]}: {len(dense)} lines of figures "
                             f"({block[0][1][:70]}...)")
    return found


def test_the_log_detector_tells_a_log_from_a_reason():
    log = ("#: (cavity 8192^2, MLUPS): fp64 1x256 28,271 (1x128 28,207; 2x 27,965; 4x 27,897)\n"
           "#: fp16s 8192^2 1,200 -> 1,140 (in place 1,328 -> 1,209), 2048^2 87.7 -> 81.4\n"
           "#: 6.42; fp16c 8192^2 1,372 -> 1,322 (in place 1,384 -> 1,290), 512^2 10.70 -> 9.48\n"
           "X = 1\n")
    reason = ("# a shared device function for a pair cost the Numba fp64 step 4-5 % on the H200\n"
              "# (the measured notes have the figures); fp16 keeps 3 digits\n"
              "X = 1\n")
    assert [len(b) for b in _comment_blocks(log)] == [3] and [len(b) for b in _comment_blocks(reason)] == [2]
    dense = [sum(len(FIGURE.findall(c)) >= FIGURES_PER_LINE for _, c in b) for b in _comment_blocks(log + reason)]
    assert dense == [3, 0]


def test_no_measurement_logs_in_comments():
    """Benchmark figures live in docs/measured/; a comment keeps the one-line why (and where the figures are)."""
    logs = measurement_logs()
    assert logs == [], f"{len(logs)} measurement logs in comments:\n" + "\n".join(logs)


#: names of review rounds and sessions that a test file's name must not carry (it names what it tests)
HISTORY_NAMES = re.compile(r"reliability\d|newuser|_r\d|_more\b|round\d|session|issue\d")


def test_tests_mirror_the_package():
    """Tests live in a tree that mirrors the package (tests/core, tests/lbm, tests/fem, tests/report; tests of the
    package's top-level modules and cross-cutting ones at tests/, of scripts/ in tests/scripts) and are named after
    what they test, not after the review round that added them."""
    tests = arch_util.ROOT / "tests"
    packages = {p.name for p in (arch_util.ROOT / "hpcsolve").iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders <= packages | {"scripts"}, sorted(folders - packages)
    historical = sorted(p.relative_to(tests).as_posix() for p in tests.rglob("test_*.py") if HISTORY_NAMES.search(p.stem))
    assert historical == []
    names = [p.name for p in tests.rglob("test_*.py")]
    assert len(names) == len(set(names)), "test file names must be unique (pytest's prepend import mode)"
