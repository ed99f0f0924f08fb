"""Progress lines at least every 10 s in every command (hpcsolve.core.heartbeat): the line's cadence on a fake
clock, and the phases a FEM run and an LBM estimate name."""

from pathlib import Path

from hpcsolve import run as runmod
from hpcsolve.core import heartbeat

CASES = Path(__file__).parents[2] / "cases"


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _Recording(heartbeat.Heartbeat):
    """A heartbeat without its thread that records every phase named."""

    def __init__(self):
        super().__init__("test", enabled=False)
        self.phases: list[str] = []

    def phase(self, what: str) -> None:
        super().phase(what)
        self.phases.append(what)


def test_a_line_every_ten_seconds_unless_progress_was_shown():
    clock, lines = _Clock(), []
    hb = heartbeat.Heartbeat("run cavity", write=lines.append, clock=clock)
    hb.phase("assembling")
    clock.now = 9.9
    assert not hb.tick()
    clock.now = 10.0
    assert hb.tick() and lines == ["hpcsolve: run cavity: assembling (10 s so far)"]
    clock.now = 15.0
    hb.touch()                  # a progress bar moved at 15 s: the next line is due at 25 s
    clock.now = 24.0
    assert not hb.tick()
    clock.now = 25.0
    assert hb.tick() and lines[-1].endswith("(25 s so far)") and len(lines) == 2


def test_phase_and_touch_do_nothing_without_an_open_heartbeat():
    heartbeat.phase("nobody listens")
    heartbeat.touch()
    with heartbeat.Heartbeat("x", enabled=False) as hb:
        heartbeat.phase("listened to")
    heartbeat.phase("after")
    assert hb.what == "listened to"


def test_a_fem_run_names_its_phases():
    with _Recording() as hb:
        runmod.run_case(CASES / "poisson_manufactured.toml", "numpy", overrides=["mesh.nx=8"], progress=False,
                        plots=False)
    assert [p.split(" ")[0] for p in hb.phases[:4]] == ["building", "setting", "error", "the"], hb.phases
    assert "49 unknowns" in hb.phases[1], hb.phases[1]     # 8 x 8 elements: 7 x 7 interior nodes


def test_an_lbm_estimate_names_its_phases():
    with _Recording() as hb:
        runmod.describe(CASES / "poiseuille.toml", "numpy", estimate=True)
    assert hb.phases[0].startswith("probing the run time: timing steps")
    assert "coarser copy towards its steady stop" in hb.phases[1]


def test_the_cli_prints_a_heartbeat_line_while_a_run_works(monkeypatch, tmp_path, capsys):
    """``hpcsolve run`` opens a heartbeat: with its period made 0.05 s, its lines name the command and the case on
    stderr; --quiet prints none. The run waits (up to 60 s) for the heartbeat's first line before it returns, so the
    test does not depend on the run outlasting the period (on a quiet CI machine this one did not)."""
    import threading

    from hpcsolve import cli
    from hpcsolve.fem import runner as fem_runner

    monkeypatch.setattr(heartbeat, "EVERY_S", 0.05)
    printed, real_line, real_run = threading.Event(), heartbeat._stderr_line, fem_runner.run

    def line(text):
        real_line(text)
        printed.set()

    def run(*args, **kwargs):
        result = real_run(*args, **kwargs)
        if heartbeat._open and heartbeat._open[-1].enabled:
            printed.wait(60.0)
        return result

    monkeypatch.setattr(heartbeat, "_stderr_line", line)
    monkeypatch.setattr(fem_runner, "run", run)
    args = ["run", str(CASES / "poisson_manufactured.toml"), "--set", "mesh.nx=64", "--no-plots", "--out",
            str(tmp_path / "a")]
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    assert f"hpcsolve: run {CASES / 'poisson_manufactured.toml'}:" in err, err
    assert cli.main(args[:-1] + [str(tmp_path / "b"), "--quiet"]) == 0
    assert "so far)" not in capsys.readouterr().err
