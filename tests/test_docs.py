"""The documentation stays true: generated pages are current, links and named files exist, the commands the guide
names are the CLI's, the user guide holds no development history, scripts/ is indexed, the notebooks are committed
with small, clean outputs."""

import contextlib
import io
import json
import re
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
GUIDE = sorted((ROOT / "docs" / "guide").glob("*.md"))
#: the pages a user reads: the README and the guide
USER_PAGES = [ROOT / "README.md", ROOT / "docs" / "README.md", *GUIDE]
#: every page whose links and file names must resolve (docs/measured/* are records kept as printed; their index is checked)
CHECKED_PAGES = [*USER_PAGES, *sorted((ROOT / "docs" / "design").glob("*.md")), ROOT / "docs" / "measured" / "README.md",
                 ROOT / "scripts" / "README.md"]
COMMANDS = ("run", "validate", "compare", "bench", "info")


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def test_case_reference_page_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "case_reference.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_guide_has_its_pages():
    names = {p.name for p in GUIDE}
    needed = {"start.md", "cases.md", "case_reference.md", "choosing_precision.md", "compare.md", "api.md",
              "troubleshooting.md"}
    assert needed <= names, sorted(needed - names)


def test_pages_mention_only_existing_case_files_scripts_and_docs():
    """Repository paths written out in the text (``cases/x.toml``, ``scripts/y.py``, ``docs/<page>.md``) exist."""
    missing = []
    for page in CHECKED_PAGES:
        text = page.read_text()
        for p in set(re.findall(r"(?<![\w/.])((?:cases|scripts|notebooks|docs)/[\w./-]+\.(?:toml|sh|py|ipynb|md))", text)):
            if not (ROOT / p).exists():
                missing.append(f"{_rel(page)}: {p}")
    assert not missing, missing
    assert re.search(r"cases/\w+\.toml", (ROOT / "README.md").read_text()), "the README should name a case file"


def _slug(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", page.read_text(), re.M)}


def test_relative_links_resolve_with_their_anchors():
    """Every relative markdown link of the README, the guide, the design pages and the indexes points at a file that
    exists, and an anchor (``page.md#section``) at a heading of that page."""
    broken = []
    for page in CHECKED_PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):           # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{_rel(page)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{_rel(page)}: {target} (no such heading)")
    assert not broken, broken


@lru_cache(maxsize=None)
def _options(command: str) -> frozenset:
    """The option strings of ``hpcsolve COMMAND`` as its --help prints them."""
    from hpcsolve.cli import build_parser

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    return frozenset(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", out.getvalue()))


def _command_lines(text: str) -> list[str]:
    """Command lines in a page: the lines of its code blocks and its inline code spans."""
    lines = []
    for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
        lines += block.splitlines()
    lines += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return lines


def test_commands_named_in_the_guide_exist_in_the_cli_help():
    """``hpcsolve COMMAND --option`` in the README and the guide: the command exists and takes the option (by its
    ``--help``); the option table of compare.md lists only options of ``hpcsolve compare``."""
    wrong, seen = [], 0
    for page in USER_PAGES:
        for line in _command_lines(page.read_text()):
            for m in re.finditer(r"\bhpcsolve (\w[\w-]*)([^|;]*)", line):
                command, rest = m.group(1), m.group(2).split("#")[0]
                if command in ("run_case", "compare_", "load_case") or not re.match(r"[a-z]", command):
                    continue
                if command not in COMMANDS:
                    wrong.append(f"{_rel(page)}: hpcsolve {command}")
                    continue
                seen += 1
                for opt in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest):
                    if opt not in _options(command):
                        wrong.append(f"{_rel(page)}: hpcsolve {command} {opt}")
    table = [row for row in (ROOT / "docs" / "guide" / "compare.md").read_text().splitlines() if row.startswith("| `--")]
    assert table, "compare.md should list the options of hpcsolve compare"
    for row in table:
        for opt in re.findall(r"(--[a-z][a-z0-9-]*)", row.split("|")[1]):
            if opt not in _options("compare"):
                wrong.append(f"docs/guide/compare.md options table: {opt}")
    assert seen >= 20, f"only {seen} hpcsolve command lines found: is the pattern still right?"
    assert not wrong, wrong


HISTORY = [
    (r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b", "a commit hash"),
    (r"\b[Ii]ssues? #?\d+", "an issue number"),
    (r"(?<![\w&])#\d+\b", "an issue number"),
    (r"\b[Ss]ession \d+", "a development session"),
]


def test_the_user_guide_holds_no_development_history():
    """The README and the guide say what is, not how it came to be: no commit hashes, issue numbers or development
    sessions (those stay in docs/measured/ and git)."""
    found = []
    for page in USER_PAGES:
        text = re.sub(r"\]\([^)]*\)", "]()", page.read_text())      # link targets may name measured files
        for pattern, what in HISTORY:
            for m in re.finditer(pattern, text):
                found.append(f"{_rel(page)}: {what}: {m.group(0)!r}")
    assert not found, found


def test_the_history_pattern_catches_what_it_should():
    samples = {"code of a910a25": 1, "fixed in issue 48": 1, "issue #16": 1, "(session 5)": 1, "1e-10 and 2026-12-07": 0,
               "#2 of 3": 1, "c_D 5.5726": 0, "0.0082249": 0}
    for text, n in samples.items():
        assert sum(len(re.findall(p, text)) for p, _ in HISTORY) >= n, text
        if n == 0:
            assert not any(re.search(p, text) for p, _ in HISTORY), text


def test_every_script_is_indexed_and_every_indexed_script_exists():
    index = (ROOT / "scripts" / "README.md").read_text()
    listed = set(re.findall(r"^\| `([\w.-]+\.(?:py|sh))`", index, re.M))
    present = {p.name for p in (ROOT / "scripts").iterdir() if p.suffix in (".py", ".sh")}
    assert listed, "scripts/README.md should list the scripts in tables"
    assert present - listed == set(), f"scripts without a line in scripts/README.md: {sorted(present - listed)}"
    assert listed - present == set(), f"scripts/README.md lists missing scripts: {sorted(listed - present)}"


def test_docs_pages_named_in_code_tests_and_cases_exist():
    """Docstrings, messages and comments that send a reader to ``docs/<page>.md`` name a page that exists."""
    missing = set()
    for folder in ("hpcsolve", "tests", "scripts", "cases", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in (".py", ".toml", ".sh", "") or not path.is_file():
                continue
            for p in re.findall(r"(?<![\w/.])(docs/[\w./-]+\.md)", path.read_text(errors="replace")):
                if not (ROOT / p).exists():
                    missing.add(f"{_rel(path)}: {p}")
    assert not missing, sorted(missing)


NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_committed_with_small_clean_outputs(path):
    """Each notebook is committed executed (scripts/execute_notebooks.py): every code cell ran, in order, none
    failed; the file stays small; no warning is printed twice; outputs give Python advice, not command lines."""
    assert path.stat().st_size < 400_000, f"{path.name}: {path.stat().st_size} bytes"
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    counts = [c["execution_count"] for c in code]
    assert counts == list(range(1, len(code) + 1)), f"{path.name}: execution counts {counts}"
    text_out = []
    for c in code:
        for o in c["outputs"]:
            assert o["output_type"] != "error", f"{path.name}: {o.get('ename')}: {o.get('evalue')}"
            if o["output_type"] == "stream":
                text_out.append("".join(o["text"]))
    warning_lines = [ln for t in text_out for ln in t.splitlines() if "Warning" in ln]
    assert len(warning_lines) == len(set(warning_lines)), f"{path.name}: repeated warnings {warning_lines}"
    joined = "\n".join(text_out)
    for advice in ("hpcsolve run", "--set ", "hpcsolve compare"):
        assert advice not in joined, f"{path.name}: command-line advice {advice!r} in the outputs"
    assert "/work/" not in joined and "/home/" not in joined, f"{path.name}: a local path in the outputs"


def test_the_multigrid_snippet_of_the_design_page_runs_and_converges(monkeypatch):
    """The Python example of docs/design/fem_multigrid.md (public names only) runs as written from the repository
    root, and its geometric multigrid solve converges in a bounded number of cycles."""
    text = (ROOT / "docs" / "design" / "fem_multigrid.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "Multigrid(" in b)
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(block, "fem_multigrid.md", "exec"), namespace)
    report = namespace["report"]
    assert report.converged and report.true_residual <= 1e-10, report
    assert report.iterations <= 20, report.iterations      # multigrid: 9 at 64 x 64 cells, measured
