"""Property-based tests of the case loader: malformed, random and mutated case files give a clear
CaseError (or load), never an uncaught exception or a hang. Counts are reported by hypothesis
(``pytest --hypothesis-show-statistics``)."""

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcsolve import run as runmod
from hpcsolve.core.cases import parse_case_text
from hpcsolve.core.errors import CaseError, HpcsolveError
from tomlgen import to_toml

CASES = sorted((Path(__file__).parents[2] / "cases").glob("*.toml"))
FUZZ = settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])


scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1e-300, 1e300, 0.5, 0.50001, 1e9, 2**40, "", "fp8", "cupy", "auto", "x" * 300]),
    st.text(max_size=20),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=8)


def _paths(data, prefix=()):
    for k, v in data.items():
        yield prefix + (k,)
        if isinstance(v, dict):
            yield from _paths(v, prefix + (k,))


def _check_loads_or_case_error(text: str, base: Path):
    try:
        case = parse_case_text(text, path=base / "fuzz.toml")
    except CaseError as exc:
        assert str(exc).strip(), "a CaseError must say what is wrong"
        return None
    # a case that validates must also describe itself (derived parameters, memory) or refuse clearly
    try:
        runmod.describe(case, backend="numpy")
    except HpcsolveError as exc:
        assert exc.exit_code == 2 and str(exc).strip()
    return case


@pytest.mark.skipif(not CASES, reason="no case files")
@FUZZ
@given(case_index=st.integers(min_value=0, max_value=max(len(CASES) - 1, 0)), data=st.data())
def test_mutated_case_files_load_or_fail_with_a_case_error(case_index, data):
    path = CASES[case_index]
    original = tomllib.loads(path.read_text())
    mutated = json.loads(json.dumps(original))  # deep copy
    paths = list(_paths(mutated))
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        target = data.draw(st.sampled_from(paths))
        node = mutated
        for k in target[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                break
        if not isinstance(node, dict):
            continue
        action = data.draw(st.sampled_from(["replace", "delete", "add_unknown"]))
        if action == "replace":
            node[target[-1]] = data.draw(values)
        elif action == "delete":
            node.pop(target[-1], None)
        else:
            node[data.draw(st.text(min_size=1, max_size=10))] = data.draw(values)
    _check_loads_or_case_error(to_toml(mutated), path.parent)


@FUZZ
@given(text=st.text(max_size=200))
def test_random_text_is_rejected_with_a_case_error(text):
    _check_loads_or_case_error(text, Path("cases"))


@FUZZ
@given(data=st.dictionaries(st.sampled_from(["solver", "name", "run", "physics", "geometry", "mesh",
                                              "numerics", "output", "problem", "solver_options"]),
                            values, max_size=6))
def test_random_tables_are_rejected_or_loaded(data):
    _check_loads_or_case_error(to_toml(data), Path("cases"))


@pytest.mark.skipif(not CASES, reason="no case files")
@FUZZ
@given(case_index=st.integers(min_value=0, max_value=max(len(CASES) - 1, 0)),
       key=st.text(min_size=0, max_size=30), value=st.text(max_size=30))
def test_random_overrides_are_rejected_or_applied(case_index, key, value):
    path = CASES[case_index]
    try:
        parse_case_text(path.read_text(), [f"{key}={value}"], path=path)
    except CaseError as exc:
        assert str(exc).strip()


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_every_shipped_case_validates_and_describes(path):
    case = parse_case_text(path.read_text(), path=path)
    info = runmod.describe(case, backend="numpy")
    assert info["case"] == case.name and info["backend"] == "numpy"
