"""Result files a user can open and trust: the final state in the XDMF time series, permissions under
the umask, labelled plots, series in physical units, statuses that say what happened."""

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from hpcsolve import cli
from hpcsolve import run as runmod

CASES = Path(__file__).parents[2] / "cases"
SMALL = ["lattice.resolution=16", "steady.enabled=false"]


def test_xdmf_time_series_ends_with_the_final_state(tmp_path):
    out = tmp_path / "run"
    res = runmod.run_case(CASES / "lid_driven_cavity.toml", "numpy", progress=False, out=out, plots=False,
                          overrides=SMALL + ["time.end_time=2.5", "time.output_interval=1"])
    assert [s.time for s in res.snapshots][-1] < res.metrics["simulated_time_s"]
    root = ET.parse(out / "result_series.xdmf").getroot()      # result.xdmf: the final state alone (meshio reads it)
    grids = root.find("Domain").find("Grid").findall("Grid")
    times = [float(g.find("Time").get("Value")) for g in grids]
    assert times == sorted(times) and times[-1] == pytest.approx(res.metrics["simulated_time_s"])
    assert grids[-1].find("Attribute").find("DataItem").text.endswith(":/fields/" + grids[-1].find("Attribute").get("Name"))


def test_files_get_the_permissions_of_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        out = tmp_path / "run"
        runmod.run_case(CASES / "lid_driven_cavity.toml", "numpy", progress=False, out=out,
                        overrides=SMALL + ["time.end_time=1"])
    finally:
        os.umask(old)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) >= 5
    assert {oct(p.stat().st_mode & 0o777) for p in files} == {oct(0o644)}


def test_every_plot_axis_is_labelled_and_taylor_green_has_its_analytic_decay(tmp_path, monkeypatch):
    from hpcsolve.lbm import plots

    figures = []
    real_save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(
        [(ax.get_xlabel(), ax.get_ylabel(), [l.get_label() for l in ax.get_lines()]) for ax in fig.axes])
        or real_save(fig, path))
    res = runmod.run_case(CASES / "taylor_green.toml", "numpy", progress=False, out=tmp_path / "tg",
                          overrides=["lattice.resolution=32"])
    s = res.series
    # physical units: the initial peak speed is the case's velocity in m/s; the energy follows the analytic decay
    assert s["max_speed"][0] == pytest.approx(runmod.load_case(CASES / "taylor_green.toml").physics.velocity,
                                              rel=0.02)
    ke, exact = np.asarray(s["kinetic_energy"]), np.asarray(s["kinetic_energy_analytic"])
    assert exact[-1] < 0.9 * exact[0] and np.max(np.abs(ke / exact - 1)) < 0.02
    assert len(figures) >= 3
    for axes in figures:
        assert all(y for _, y, _ in axes)          # every axes (colorbars too) names its quantity and unit
        assert any(x for x, _, _ in axes)          # and the figure its x axis (shared x: the bottom panel)
    assert any("analytic decay" in lines for axes in figures for _, _, lines in axes)


def test_a_steady_run_that_does_not_reach_steady_state_says_so(tmp_path, capsys):
    out = tmp_path / "run"
    code = cli.main(["run", str(CASES / "lid_driven_cavity.toml"), "--out", str(out), "--no-plots",
                     "--set", "lattice.resolution=16", "--set", "time.end_time=1"])
    assert code == 0
    captured = capsys.readouterr().out
    from hpcsolve.core.results import read_h5

    res = read_h5(out / "result.h5")
    assert res["attrs"]["status"] == "not_steady" and "steady state not reached" in res["attrs"]["message"]
    steps = res["metrics"]["steps"]
    # the printed summary shows the steps done (and the planned count separately)
    assert any(line.split()[:2] == ["steps", str(steps)] for line in captured.splitlines())


def test_quiet_still_prints_why_the_exit_code_is_not_zero(tmp_path, capsys):
    code = cli.main(["run", str(CASES / "poisson_manufactured.toml"), "--precision", "fp32", "--out",
                     str(tmp_path / "p"), "--quiet", "--no-plots", "--set", "mesh.nx=32", "--set", "solve.maxiter=1"])
    # (one iteration: fp32's stall alone ends accurate_to_discretisation, exit 0, since issue 50)
    err = capsys.readouterr().err
    assert code == 3 and "not converged" in err and "precision 'mixed'" in err and "solve.rtol" in err
