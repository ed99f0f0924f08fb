"""The solver-family protocol (hpcsolve.core.family): describe once, run with the description, fixed
result keys, capabilities instead of signature probing."""

from pathlib import Path

import pytest

from hpcsolve.core import family as families
from hpcsolve import run as runmod
from hpcsolve.core.errors import CaseError
from hpcsolve.core.family import CAPABILITIES, SOLVER_SECONDS
from hpcsolve.lbm import geometry

CASES = Path(__file__).parents[2] / "cases"
SMALL_CAVITY = ["lattice.resolution=16", "time.end_time=1", "steady.enabled=false"]


def test_registered_families_declare_known_capabilities():
    lbm, fem = families.get("lbm"), families.get("fem")
    assert (lbm.name, fem.name) == ("lbm", "fem")
    assert lbm.capabilities == CAPABILITIES and fem.capabilities == frozenset()
    with pytest.raises(CaseError, match="solver"):
        families.get("sph")


def test_compare_builds_the_lbm_geometry_once_per_configuration(monkeypatch):
    from hpcsolve.report.compare import compare

    calls = []
    real = geometry.build
    monkeypatch.setattr(geometry, "build", lambda *a, **k: calls.append(1) or real(*a, **k))
    comp = compare(CASES / "lid_driven_cavity.toml", backends=["numpy"], precisions=["fp64", "fp32"],
                   overrides=SMALL_CAVITY)
    assert len(comp.runs) == 2
    # reference + fp32, each with a warm-up and a timed run: one geometry per configuration (was 5)
    assert len(calls) == 2


@pytest.mark.parametrize("case, key", [("lid_driven_cavity.toml", "step_s"), ("poisson_manufactured.toml", "solve_s")])
def test_every_family_reports_the_solver_seconds_key(case, key):
    overrides = SMALL_CAVITY if case.startswith("lid") else ["mesh.nx=8"]
    result = runmod.run_case(CASES / case, "numpy", overrides=overrides, progress=False)
    assert result.timings[SOLVER_SECONDS] == result.timings[key] > 0
    assert result.timings["total_s"] >= result.timings[SOLVER_SECONDS]


def test_a_description_is_reused_by_the_run(monkeypatch):
    case, backend, policy, desc = runmod.plan(CASES / "lid_driven_cavity.toml", "numpy", overrides=SMALL_CAVITY)
    assert desc.setup is not None and desc.memory_bytes > 0
    monkeypatch.setattr(geometry, "build", lambda *a, **k: pytest.fail("geometry built again"))
    result = runmod.run_case(case, backend, policy, progress=False, description=desc)
    assert result.metrics["steps"] > 0


def test_resume_is_refused_for_a_family_without_checkpoints(tmp_path):
    from hpcsolve.core.checkpoint import Checkpoint, write_checkpoint

    case = runmod.load_case(CASES / "poisson_manufactured.toml")
    write_checkpoint(tmp_path, Checkpoint(step=1, arrays={}, state={},
                                          meta={"case_text": case.text, "case_json": case.effective_json(),
                                                "backend": "numpy", "precision": "fp64", "solver": "fem",
                                                "overrides": [], "case_file": str(case.path)}))
    with pytest.raises(CaseError, match="--resume.*checkpoints"):
        runmod.run_case(None, resume=tmp_path, force=True)
