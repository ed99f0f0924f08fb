"""The stability rule (hpcsolve/lbm/units.py, hpcsolve/lbm/case.py ``stability``): validate warns and run refuses
(unless forced) a lattice known to blow up; the shipped cases, the accuracy gate's settings and the CPU advice in
the case comments pass it; the refused setting really blows up and the accepted one next to it does not."""

from __future__ import annotations

import json
import re
import shlex
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from hpcsolve import cli
from hpcsolve.core.cases import load_case
from hpcsolve.core.errors import BlowUpError, CaseError
from hpcsolve.lbm import runner
from hpcsolve.lbm.case import derive
from hpcsolve.lbm.units import CELL_REYNOLDS_MAX, cell_reynolds
from hpcsolve.run import prepare, run_case

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "cases"
LBM_CASES = sorted(p for p in CASES.glob("*.toml") if 'solver = "lbm"' in p.read_text())
UNSTABLE_2D2 = ["lattice.resolution=10"]          # the user's setting: tau 0.515, Re_cell 15


def _re_cell(derived) -> float:
    return cell_reynolds(derived.peak_lattice_velocity, derived.units.lattice_viscosity)


@pytest.mark.parametrize("path", LBM_CASES, ids=lambda p: p.stem)
def test_every_shipped_case_passes_the_rule_at_its_settings(path):
    d = derive(load_case(path))
    assert d.risks == [], d.risks
    assert not any("cell Reynolds" in w for w in d.warnings)


def test_the_accuracy_gates_settings_pass_the_rule():
    """The GPU and CPU accuracy gates (tests/accuracy_gate.py) run shipped cases at other settings: none is refused,
    and their largest cell Reynolds number among open flows stays below the limit."""
    sys.path.insert(0, str(ROOT / "tests"))
    import accuracy_gate as G

    runs = G.gpu_runs() + [G.GateRun("cpu_cavity", "cases/lid_driven_cavity.toml", G.CPU_CAVITY, "numpy", "fp64"),
                           G.GateRun("cpu_2d2", "cases/cylinder_2d2.toml", G.CPU_2D2, "numpy", "fp64")]
    seen = 0
    for run in runs:
        d = derive(load_case(ROOT / run.case, list(run.overrides)))
        assert d.risks == [], (run.name, d.risks)
        seen += 1
    assert seen == len(runs) > 10


def test_validate_warns_at_resolution_10_naming_field_value_limit_and_what_to_set(capsys):
    assert cli.main(["validate", str(CASES / "cylinder_2d2.toml"), "--backend", "numpy", "--json",
                     "--set", *UNSTABLE_2D2]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["relaxation_time"] == pytest.approx(0.515)
    [w] = [w for w in info["warnings"] if "cell Reynolds" in w]
    assert w.startswith("lattice.resolution = 10: ")
    assert "= 15 (tau 0.5150) is above 10.5" in w and "set lattice.resolution >= 20" in w
    assert "refuses this unless forced (--force)" in w


def test_the_suggested_resolution_divides_the_domain_and_passes():
    """The text's lattice.resolution >= N: the smallest whole-cell grid with Re_cell <= the limit (2D-2: a multiple
    of 10 for the 0.41 m channel)."""
    d = derive(load_case(CASES / "cylinder_2d2.toml", UNSTABLE_2D2))
    need = int(re.search(r"lattice.resolution >= (\d+)", d.risks[0]).group(1))
    fixed = derive(load_case(CASES / "cylinder_2d2.toml", [f"lattice.resolution={need}"]))
    assert fixed.risks == [] and _re_cell(fixed) <= CELL_REYNOLDS_MAX < _re_cell(d)
    assert need == 20 and _re_cell(d) == pytest.approx(15.0)


def test_run_refuses_resolution_10_with_exit_2_before_writing(tmp_path, capsys):
    out = tmp_path / "r"
    code = cli.main(["run", str(CASES / "cylinder_2d2.toml"), "--backend", "numpy", "--quiet", "--no-plots",
                     "--out", str(out), "--set", *UNSTABLE_2D2, "--set", "time.steps=50"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("hpcsolve: error: lattice.resolution: the cell Reynolds number"), err
    assert "(got 10; allowed: a lattice the stability rule accepts, or --force" in err
    assert not out.exists() or not any(out.iterdir())


def test_the_api_refuses_with_a_case_error_naming_the_field():
    with pytest.raises(CaseError) as exc:
        run_case(CASES / "cylinder_2d2.toml", "numpy", overrides=UNSTABLE_2D2 + ["time.steps=50"], progress=False,
                 plots=False)
    assert exc.value.field == "lattice.resolution" and exc.value.value == 10


def test_the_family_runs_it_when_forced_and_warns():
    case, backend, policy = prepare(CASES / "cylinder_2d2.toml", "numpy", "fp64", UNSTABLE_2D2 + ["time.steps=100"])
    with pytest.warns(UserWarning, match="cell Reynolds number"):
        r = runner.FAMILY.run(case, backend, policy, progress=False, force=True)
    assert r.metrics["steps"] == 100 and r.status == "completed"


def test_run_case_and_the_cli_run_it_with_force(tmp_path, capsys):
    """``--force`` / ``run_case(..., force=True)``: hpcsolve/run.py passes ``force`` on to the family's run."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = run_case(CASES / "cylinder_2d2.toml", "numpy", overrides=UNSTABLE_2D2 + ["time.steps=100"],
                     progress=False, plots=False, force=True)
        assert r.metrics["steps"] == 100
        code = cli.main(["run", str(CASES / "cylinder_2d2.toml"), "--backend", "numpy", "--quiet", "--no-plots",
                         "--force", "--out", str(tmp_path / "f"), "--set", *UNSTABLE_2D2, "--set", "time.steps=100"])
    assert code == 0, capsys.readouterr().err


def _advice(path: Path) -> list[list[str]]:
    """The ``--set`` overrides of every ``hpcsolve run`` command written in the case file's comments."""
    out = []
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#") and "hpcsolve run" in line and "--set" in line:
            words = shlex.split(line.lstrip("# "))
            out.append([words[i + 1] for i, w in enumerate(words) if w == "--set"])
    return out


@pytest.mark.parametrize("path", LBM_CASES, ids=lambda p: p.stem)
def test_every_run_command_in_the_case_comments_passes_the_rule(path):
    for overrides in _advice(path):
        d = derive(load_case(path, overrides))
        assert d.risks == [] and not any("cell Reynolds" in w for w in d.warnings), (overrides, d.warnings)


def test_the_2d2_cpu_advice_as_written_runs_finite_without_a_warning():
    """cylinder_2d2.toml's CPU command (resolution 20, end time 8 s), its first 400 steps on NumPy fp64: finite, no
    warning from validate's rules, and the lattice speed stays near the inflow's (0.075 peak), far from a blow-up."""
    [advice] = _advice(CASES / "cylinder_2d2.toml")
    assert "lattice.resolution=20" in advice
    d = derive(load_case(CASES / "cylinder_2d2.toml", advice))
    assert d.warnings == [] and d.steps == 32000
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = run_case(CASES / "cylinder_2d2.toml", "numpy", overrides=advice + ["time.steps=400",
                     "time.output_interval=0", "time.monitor_interval=50"], progress=False, plots=False)
    # 400 steps hold no shedding yet: only the published-range verdicts warn
    assert [str(w.message) for w in seen if "outside the reference range" not in str(w.message)] == []
    assert r.status == "completed" and r.metrics["steps"] == 400
    assert np.all(np.isfinite(r.fields["velocity"]))
    assert r.metrics["max_lattice_speed"] < 0.15


def _run_steps(overrides, steps):
    case, backend, policy = prepare(CASES / "cylinder_2d2.toml", "numpy", "fp64",
                                    overrides + [f"time.steps={steps}", "time.output_interval=0",
                                                 "time.monitor_interval=50", "validation.reference='none'"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return runner.run(case, backend, policy, progress=False)


def test_the_refused_setting_blows_up_and_the_accepted_one_beside_it_does_not():
    """The measurement behind the limit, at D = 10 (220 x 41 cells): Re_cell 15 (the user's setting) blew up at step
    ~1,050; Re 67 (Re_cell 10.05, accepted) stays finite over the same 1,500 steps."""
    with pytest.raises(BlowUpError) as exc:
        _run_steps(UNSTABLE_2D2, 1500)
    assert exc.value.step is not None and 500 < exc.value.step <= 1500
    ok = _run_steps(UNSTABLE_2D2 + ["physics.reynolds=67"], 1500)
    assert ok.status == "completed" and ok.metrics["max_lattice_speed"] < 0.2
    assert derive(load_case(CASES / "cylinder_2d2.toml", UNSTABLE_2D2 + ["physics.reynolds=67",
                                                                       "validation.reference='none'"])).risks == []


def test_a_closed_box_is_not_held_to_the_open_flow_limit():
    """The cavity stayed finite at Re_cell 25 (resolution 4, Re 100): only the tau floor applies to it."""
    d = derive(load_case(CASES / "lid_driven_cavity.toml", ["lattice.resolution=5"]))
    assert _re_cell(d) == pytest.approx(20.0) and d.risks == []


def test_mach_and_obstacle_warnings_name_field_value_limit_and_what_to_set():
    fast = derive(load_case(CASES / "lid_driven_cavity.toml", ["lattice.velocity=0.15"]))
    [w] = fast.warnings
    assert w.startswith("lattice.velocity = 0.15: the peak lattice velocity 0.15 (Mach 0.26) is above 0.1")
    assert "set lattice.velocity lower" in w and fast.risks == []
    small = derive(load_case(CASES / "cylinder_2d1.toml", ["lattice.resolution=5", "domain.height=0.4",
                                                           "validation.reference='none'"]))
    [w] = [w for w in small.warnings if w.startswith("obstacles[0]")]
    assert "5 cells across its diameter" in w and "fewer than 10" in w and "set lattice.resolution >= 10" in w


def test_compare_refuses_an_unstable_lattice_before_the_reference_runs(capsys):
    """compare (dry run included) refuses the 2D-2 lattice at resolution 10 with exit 2 naming lattice.resolution
    and its cell Reynolds number 15, before any estimate or run."""
    from hpcsolve import cli

    code = cli.main(["compare", str(Path(__file__).resolve().parents[2] / "cases" / "cylinder_2d2.toml"),
                     "--set", "lattice.resolution=10", "--backends", "numpy", "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "lattice.resolution" in err and "= 15 " in err and "compare has no --force" in err
    assert "predicted" not in err
