"""scripts/outlet_reflection.py: the envelope decay it reports, on signals with a known answer, and one small run."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("outlet_reflection", ROOT / "scripts" / "outlet_reflection.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("tau", [150.0, 900.0])
def test_envelope_decay_of_a_damped_oscillation(tau):
    """c_L = m + A exp(-t / tau) cos(w t), sampled every 3 steps: the fitted e-folding time is tau (within 5 %:
    the samples miss the true maxima by up to 1.5 steps)."""
    mod = _script()
    t = np.arange(1, 4000, 3.0)
    y = 0.0113 + 0.1 * np.exp(-t / tau) * np.cos(2 * np.pi * t / 47.0)
    got, peaks = mod.envelope_decay(t, y)
    assert peaks >= 3 and got == pytest.approx(tau, rel=0.05)


def test_envelope_decay_of_a_steady_or_growing_signal():
    mod = _script()
    t = np.arange(1, 2000, 2.0)
    steady = mod.envelope_decay(t, 0.01 + 1e-3 * np.cos(t / 7.0))[0]      # maxima that do not decay
    assert math.isinf(steady) or steady > 1e5
    assert math.isinf(mod.envelope_decay(t, 0.01 + 1e-3 * np.exp(t / 500.0) * np.cos(t / 7.0))[0])   # growing
    assert math.isnan(mod.envelope_decay(t, np.full_like(t, 0.5))[0])


@pytest.mark.slow
def test_small_run_rings_and_the_characteristic_outlet_lets_the_sound_out(capsys):
    """Slow (~60-110 s NumPy on the shared 2-core machine): ``python -m pytest -m slow``. Its fast counterpart,
    tests/lbm/test_validation_lbm.py::test_outlet_rules_reflect_a_sound_pulse_as_linear_acoustics_says, checks both
    outlet rules' reflection of a sound pulse against linear acoustics in under a second.

    2D-1 at 10 cells across the cylinder (a loose steady check), NumPy, both outlet rules: after a 5 % inlet
    step the lift rings and its envelope decays within the recorded periods (finite, positive e-folding time,
    shorter than the record); in the second period the along-channel (low-pass) ringing with the characteristic
    outlet is well below the fixed-pressure one's (seen at 8 periods: 7.4e-5 against 5.9e-4 over periods 1-3)."""
    mod = _script()
    assert mod.main(["--resolution", "10", "--periods", "2", "--every", "5", "--set", "steady.tolerance=2e-2",
                     "--outlets", "pressure", "characteristic"]) == 0
    out = capsys.readouterr().out.splitlines()
    heads = [i for i, ln in enumerate(out) if ", outlet " in ln]
    assert len(heads) == 2 and "outlet pressure" in out[heads[0]] and "outlet characteristic" in out[heads[1]]
    low = []
    for i in heads:
        periods = float(out[i].split("steps = ")[1].split(" acoustic")[0])
        assert 0 < periods < 2
        second = next(ln for ln in out[i + 1:i + 4] if ln.strip().startswith("periods 1-"))
        low.append(float(second.split("low-pass largest ")[1].split(",")[0]))
    assert low[1] < 0.5 * low[0], low
