"""The Examples sections of the public API's docstrings run, on the NumPy backend at tiny sizes, and print what they
say: ``hpcsolve.fem.solve``, ``run_case``, ``compare``, ``load_case`` and ``load_result``."""

from __future__ import annotations

import doctest
import importlib

import pytest

#: module -> (the public function whose docstring holds the examples, the fewest examples it has)
DOCUMENTED = {
    "hpcsolve.fem.api": ("solve", 12),
    "hpcsolve.run": ("run_case", 9),
    "hpcsolve.report.compare": ("compare", 6),
    "hpcsolve.core.cases": ("load_case", 8),
    "hpcsolve.core.results": ("load_result", 6),
}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_the_docstring_examples_run_and_print_what_they_say(module, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)              # nothing an example writes lands in the working tree
    monkeypatch.setenv("MPLBACKEND", "Agg")
    mod = importlib.import_module(module)
    name, fewest = DOCUMENTED[module]
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    tests = {t.name.rsplit(".", 1)[-1]: t for t in finder.find(mod, module) if t.examples}
    assert name in tests, f"{module}.{name} has no Examples section"
    assert len(tests[name].examples) >= fewest
    for test in tests.values():
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0 and result.attempted >= fewest


@pytest.mark.parametrize("module", sorted(DOCUMENTED))
def test_the_public_function_has_numpydoc_sections(module):
    name, _ = DOCUMENTED[module]
    doc = getattr(importlib.import_module(module), name).__doc__
    for section in ("Parameters", "Returns", "Raises", "Examples"):
        assert f"\n    {section}\n    {'-' * len(section)}\n" in doc, (module, name, section)
