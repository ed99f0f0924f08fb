"""Markers keyed on where the tests run.

- ``gpu``: needs a real CUDA device (cupy or numba-cuda); skipped with the reason elsewhere.
- ``cudasim``: Numba-CUDA kernels under the CUDA simulator. They run only in a pytest process
  started with NUMBA_ENABLE_CUDASIM=1 (the variable must be set before numba is imported),
  see scripts/test.sh; in other processes they are skipped.
"""

import os

import matplotlib
import pytest
from hypothesis import settings

matplotlib.use("Agg")

# Hypothesis draws the same examples on every run (derandomize: a CI result never depends on luck, and a failure
# reproduces); HYPOTHESIS_PROFILE=explore draws new random examples for a local hunt. Tests keep their own
# max_examples; no deadlines (a loaded machine is no failure).
settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
settings.register_profile("explore", deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def _default_signal_dispositions() -> None:
    """The suite's process starts with the dispositions an interactive terminal gives, whatever started it: a
    non-interactive shell's background job inherits SIGINT and SIGQUIT ignored, nohup SIGHUP ignored, and an
    ignored signal stays ignored across exec (hpcsolve keeps an inherited ignored SIGHUP ignored, by design). The
    signal tests, in process and in the subprocesses they start, then test hpcsolve, not how the suite was run."""
    import signal

    for sig, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGQUIT, signal.SIG_DFL),
                         (signal.SIGHUP, signal.SIG_DFL), (signal.SIGTERM, signal.SIG_DFL)):
        if signal.getsignal(sig) == signal.SIG_IGN:
            signal.signal(sig, default)


_default_signal_dispositions()


def gpu_backends() -> list[str]:
    from hpcsolve.core import backends

    if SIM:
        return []
    return [n for n in ("cupy", "numba-cuda") if backends.probe(n).available]


def pytest_collection_modifyitems(config, items):
    from hpcsolve.core import backends

    usable = gpu_backends()
    reasons = "; ".join(f"{n}: {backends.probe(n).reason}" for n in ("cupy", "numba-cuda"))
    skip_gpu = pytest.mark.skip(reason=f"no usable GPU backend ({reasons})")
    skip_sim = pytest.mark.skip(reason="CUDA-simulator test: run with NUMBA_ENABLE_CUDASIM=1 -m cudasim (scripts/test.sh)")
    for item in items:
        if "gpu" in item.keywords and not usable:
            item.add_marker(skip_gpu)
        if "cudasim" in item.keywords and not SIM:
            item.add_marker(skip_sim)


@pytest.fixture
def gpu_backend_names():
    return gpu_backends()


@pytest.fixture(autouse=True)
def _compare_takes_its_least_timings(monkeypatch):
    """``compare`` adds timed runs (up to 10) while the spread of the times is above 5 %: on a loaded machine it
    always is, so a test's work would depend on the load. In the suite every configuration is timed exactly
    MIN_TIMED times (the rule itself is tested on given times in tests/report/test_compare.py)."""
    from hpcsolve.report import compare, comparison

    monkeypatch.setattr(compare, "MAX_REPEATS", comparison.MIN_TIMED)


@pytest.fixture(autouse=True)
def _steady_prediction_counts_work(monkeypatch):
    """``--dry-run`` of a steady case runs coarse copies towards their steady stop for SURROGATE_SECONDS (2 s) of wall
    time, then extrapolates: on a loaded machine a copy that stops in 0.4 s quiet ran out of its 2 s, and what a test
    saw depended on the load. In the suite the 2 s are counted in the copies' work at a nominal rate
    (``estimate.WorkClock``): the same prediction on every machine (the wall-clock rule itself is tested on a fake
    clock in tests/lbm/test_steady_stop_prediction.py)."""
    from hpcsolve.lbm import estimate

    monkeypatch.setattr(estimate, "surrogate_clock", estimate.WorkClock())


def _plain(value):
    """NumPy scalars and arrays as Python numbers and lists (the pytest-xdist workers send recorded properties
    to the controller, whose serializer knows only Python's own types)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@pytest.fixture
def record_property(record_property):
    """pytest's ``record_property`` with the value made plain (see :func:`_plain`)."""
    return lambda name, value: record_property(name, _plain(value))


@pytest.fixture(autouse=True)
def _simulated_fp64_blocks_cut_to_the_row(monkeypatch):
    """Under the CUDA simulator (which runs every thread of a block in Python) the fp64 LBM kernels take the short-row
    launch shape the other storages already take on rows of at most 256 cells: one block per row cut to whole warps
    (32 threads on the tests' 8-16-cell rows, instead of 256 mostly idle ones). The kernel code is the same for any
    block size; the shape rule itself is tested outside the simulator (tests/lbm/test_streaming_choice.py)."""
    if SIM:
        from hpcsolve.lbm.steppers import kernels_numba

        monkeypatch.setitem(kernels_numba.LAUNCH_SHORT, 8, kernels_numba.LAUNCH_SHORT[4])
