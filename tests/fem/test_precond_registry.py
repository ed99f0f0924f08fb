"""The preconditioner and solve-method registries (hpcsolve/fem/linalg/precond/registry.py,
hpcsolve/fem/linalg/methods.py): what a name means is stated once, code asks the objects and never compares the names
(an ast scan, as tests/test_architecture.py does for backend and codec names), and a new preconditioner is one class
and one ``register`` call: this file alone makes one that ``hpcsolve.fem.solve``, a case file, the run's report and
its estimate take."""

from __future__ import annotations

import ast
import math

import numpy as np
import pytest

import arch_util
from hpcsolve.core.cases import load_case
from hpcsolve.core.errors import CaseError
from hpcsolve.core.precision import get_precision
from hpcsolve.fem import runner, solve
from hpcsolve.fem.choices import preconditioner_spec, reported_method
from hpcsolve.fem.discrete import testproblems as tp
from hpcsolve.fem.linalg import methods
from hpcsolve.fem.linalg.precond import Preconditioner, registry

GRAPH = arch_util.graph()
POISSON = arch_util.ROOT / "cases" / "poisson_manufactured.toml"
#: where the names stand beside what they mean
REGISTRIES = {"hpcsolve.fem.linalg.precond.registry", "hpcsolve.fem.linalg.methods"}
#: the rooms scanned: the FEM family and what sits on it (core knows no family; "auto" there is a backend's name)
SCANNED = ("hpcsolve.fem", "hpcsolve.report", "hpcsolve.run", "hpcsolve.cli")
#: literals that are another vocabulary's words in these modules, not preconditioner or method names: the multigrid
#: options' "auto" (MGOptions.amg_setup, level_format) and the smoother "jacobi" (MGOptions.smoother). No
#: preconditioner or method name is exempt anywhere.
_MULTIGRID_OPTIONS = {"auto", "jacobi"}
OTHER_VOCABULARIES = {f"hpcsolve.fem.linalg.precond.{room}": _MULTIGRID_OPTIONS
                      for room in ("aggregation", "hierarchy", "multigrid", "cycle", "layout", "mg_options", "coarse",
                                   "geometric", "sa_device")}


def _names() -> set[str]:
    return set(registry.names()) | set(methods.names())


def _compared(tree, names: set[str]):
    """(line, name) of every comparison (==, !=, in, not in against a literal or a literal tuple / list / set) and
    every match-case value of one of ``names``."""
    for node in ast.walk(tree):
        sides = ([node.left, *node.comparators] if isinstance(node, ast.Compare)
                 else [node.value] if isinstance(node, ast.MatchValue) else [])
        for side in sides:
            consts = [side] if isinstance(side, ast.Constant) else (
                list(side.elts) if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [])
            for c in consts:
                if isinstance(c, ast.Constant) and c.value in names:
                    yield node.lineno, c.value


def test_no_preconditioner_or_method_name_comparisons_outside_the_registries():
    """Code asks the spec (``spec.distributed``, ``spec.needs_grid``, ``spec.cycle``) or the method
    (``method.mixed``, ``method.direct``, ``method.preconditioner``), it never compares their names."""
    names = _names()
    assert {"auto", "none", "jacobi", "mg", "amg", "cg", "pcg-jacobi", "spsolve", "cg-reliable"} <= names
    found = []
    for mod, path in GRAPH.mods.items():
        if mod in REGISTRIES or not mod.startswith(SCANNED):
            continue
        allowed = OTHER_VOCABULARIES.get(mod, set())
        found += [f"{mod}:{line} {name!r}" for line, name in _compared(ast.parse(path.read_text()), names)
                  if name not in allowed]
    assert found == []


def test_the_scan_finds_what_it_should():
    code = ('if pc == "mg": pass\nif method in ("cg", "pcg-jacobi"): pass\nif name not in ["amg"]: pass\n'
            'match name:\n    case "spsolve": pass\nif x == "fp64": pass\nd = {"mg": 1}\n')
    assert sorted(_compared(ast.parse(code), _names())) == [(1, "mg"), (2, "cg"), (2, "pcg-jacobi"), (3, "amg"),
                                                            (5, "spsolve")]


def test_each_rule_is_stated_once_on_its_object():
    pcg = methods.get("pcg-jacobi")
    assert pcg.preconditioner == "jacobi" and pcg.runs == "cg" and pcg.label(Preconditioner()) == "pcg-jacobi"
    assert methods.with_preconditioner(methods.get("cg"), "jacobi") is pcg
    assert methods.with_preconditioner(methods.get("cg"), "amg").name == "cg"
    assert [n for n in registry.names() if registry.get(n).distributed] == ["none", "jacobi"]
    assert [n for n in registry.names() if registry.get(n).needs_grid] == ["mg"]
    assert registry.get("mg").fallback == "amg" and registry.get("AMG") is registry.get("amg")
    with pytest.raises(CaseError, match="not distributed yet") as exc:
        registry.check_distributed(registry.get("amg"), "solve.preconditioner")
    assert exc.value.field == "solve.preconditioner" and exc.value.allowed.startswith("none or jacobi on several")
    with pytest.raises(CaseError, match="allowed: auto, none, jacobi, mg, amg"):
        registry.get("ssor")


def test_the_case_schema_takes_the_registered_names():
    assert load_case(POISSON, ["solve.preconditioner='AMG'"]).solve.preconditioner == "amg"
    with pytest.raises(CaseError) as exc:
        load_case(POISSON, ["solve.preconditioner='ssor'"])
    assert exc.value.field == "solve.preconditioner" and exc.value.allowed == "allowed: " + registry.allowed_text()
    with pytest.raises(CaseError, match="allowed: " + ", ".join(methods.names())):
        load_case(POISSON, ["solve.method='gmres'"])


def test_the_object_keeps_its_name_from_the_case_to_the_report():
    """"auto" resolves to a spec, the spec builds the object, the object (its spec) names the report's entry."""
    policy = get_precision("fp64", family="fem")
    case = load_case(POISSON, ["mesh.nx=8", "solve.reference='never'", "output.plots=false"])
    spec = preconditioner_spec(case, None, policy)
    assert spec is registry.get("jacobi") and reported_method(case, policy, spec) == "pcg-jacobi"
    res = runner.run(case, "numpy", policy)
    assert res.metrics["preconditioner"] == "jacobi" and res.metrics["method"] == "pcg-jacobi"
    assert res.metrics["converged"] and res.metrics["true_residual"] <= case.solve.rtol


class RowSum(Preconditioner):
    """A new preconditioner, defined here: M = diag(sum_j |a_ij|)^-1, fused into the CG kernels as Jacobi is."""

    name = "row-sum"
    identity = False

    def diagonal(self, A, dtype):
        rows = np.asarray(abs(A.to_scipy()).sum(axis=1)).ravel()
        return A.low.to_device((1.0 / rows).astype(dtype))


@pytest.fixture
def row_sum():
    spec = registry.register(registry.PreconditionerSpec(
        "row-sum", "inverse absolute row sums", build=lambda inputs: RowSum(), distributed=True, aliases=("rowsum",)))
    yield spec
    registry.unregister(spec.name)


def test_a_new_preconditioner_is_one_class_and_one_registration(row_sum):
    """hpcsolve.fem.solve by name, a case (its alias: the schema takes it), the run's report, the validate and
    dry-run paths: all from the registration above."""
    P = tp.jumps(24)                      # coefficient jumps of 1e6: a diagonal preconditioner pays
    _, plain = solve(P.A, P.b, rtol=1e-10, method="cg")
    _, jac = solve(P.A, P.b, rtol=1e-10, method="cg", preconditioner="jacobi")
    x, rep = solve(P.A, P.b, rtol=1e-10, method="cg", preconditioner="row-sum")
    assert rep.converged and rep.true_residual <= 1e-10 and rep.method == "cg+row-sum"
    assert rep.iterations < plain.iterations / 2 and abs(rep.iterations - jac.iterations) <= 0.2 * jac.iterations
    r = P.b - P.A @ x
    assert np.linalg.norm(r) / np.linalg.norm(P.b) <= 1e-10

    policy = get_precision("fp64", family="fem")
    case = load_case(POISSON, ["mesh.nx=16", "solve.preconditioner='rowsum'", "solve.reference='never'",
                               "output.plots=false"])
    assert case.solve.preconditioner == "row-sum"
    desc = runner.FAMILY.describe(case, "numpy", policy)
    assert desc.parameters["preconditioner"] == "row-sum" and desc.parameters["method"] == "cg"
    assert runner.FAMILY.check_inputs(case, "numpy", policy, desc)["preconditioner_setup"] == "row-sum: nothing to set up"
    res = runner.run(case, "numpy", policy, mesh=desc.setup)
    assert res.metrics["preconditioner"] == "row-sum" and res.metrics["method"] == "cg+row-sum"
    jacobi = runner.run(case.with_overrides("solve.preconditioner='jacobi'"), "numpy", policy)
    assert res.metrics["converged"] and res.metrics["error_l2"] == pytest.approx(jacobi.metrics["error_l2"], rel=1e-6)
    assert np.abs(res.fields["u"] - jacobi.fields["u"]).max() <= 1e-8
    est = runner.FAMILY.estimate_runtime(case, "numpy", policy, desc)
    # calibrated on the case itself (289 unknowns): the model's count is the run's, to a block of iterations
    assert abs(est["estimated_iterations"] - res.metrics["iterations"]) <= 64 and math.isfinite(est["estimated_seconds"])


def test_a_registered_name_is_refused_where_its_spec_says_so(row_sum):
    with pytest.raises(CaseError, match="options apply to preconditioner 'mg' or 'amg'"):
        solve(tp.poisson_fd(7).A, np.ones(49), preconditioner="row-sum", multigrid={"hierarchy": "fp32"})
    case = load_case(POISSON, ["mesh.nx=8", "solve.method='pcg-jacobi'", "solve.preconditioner='row-sum'"])
    with pytest.raises(CaseError, match="is CG with the Jacobi preconditioner") as exc:
        runner.FAMILY.describe(case, "numpy", get_precision("fp64", family="fem"))
    assert exc.value.field == "solve.preconditioner"
    with pytest.raises(ValueError, match="registered already"):
        registry.register(registry.PreconditionerSpec("row-sum", "again", build=lambda inputs: RowSum()))
