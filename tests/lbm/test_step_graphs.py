"""gpu_common.StepGraphs, the bookkeeping of step runs replayed as CUDA graphs, with a stand-in capture (CI: no
GPU). The GPU test test_gpu_lbm.py::test_steps_replayed_as_cuda_graphs_equal_steps_launched_one_by_one checks
the replays bitwise on the device."""

from hpcsolve.lbm.steppers.gpu_common import GRAPH_STEPS, StepGraphs


class FakeStepper:
    """Two buffers swapped every step, like the GPU steppers; counts steps run, launched, recorded."""

    def __init__(self, fail=False):
        self.a, self.b = object(), object()
        self.steps = self.launched = self.recorded = 0
        self.recording = False
        self.fail = fail
        self.graphs = StepGraphs(self.capture)

    def capture(self, fn):
        self.recording = True
        try:
            fn()
            if self.fail:
                raise RuntimeError("operation not permitted when stream is capturing")
        finally:
            self.recording = False
        k = self.recorded
        self.recorded = 0

        def replay():
            self.steps += k
        return replay

    def direct(self, n):
        for _ in range(n):
            if self.recording:
                self.recorded += 1
            else:
                self.steps += 1
                self.launched += 1
            self.a, self.b = self.b, self.a

    def restore(self, buffers, parity):
        self.a, self.b = buffers

    def step(self, n):
        n = self.graphs.advance(n, self.direct, (self.a, self.b), 0, self.restore)
        self.direct(n)


def test_runs_are_launched_once_then_recorded_then_replayed_per_starting_state():
    s = FakeStepper()
    a0, b0 = s.a, s.b
    for call in range(5):
        s.step(127)          # odd: starting states alternate
    assert s.steps == 5 * 127
    assert (s.a, s.b) == (b0, a0)
    # launched from Python: every run length in the first call from each state (2 x 126), plus the single
    # step at the end of every call (5); everything after that is replayed
    assert s.launched == 2 * 126 + 5
    assert len(s.graphs._cache) == 2 * len(GRAPH_STEPS)
    assert all(r is not None for _, r in s.graphs._cache.values())


def test_a_failed_capture_restores_the_buffers_and_switches_graphs_off():
    s = FakeStepper(fail=True)
    s.step(64)               # first use: launched
    a, b = s.a, s.b
    s.step(64)               # the capture fails: nothing ran, the steps are launched instead
    assert s.steps == 128 and (s.a, s.b) == (a, b)
    assert not s.graphs.enabled and "CUDA graph capture failed" in s.graphs.error
    s.step(10)
    assert s.steps == 138 and s.launched == 138


def test_graphs_off_launches_everything():
    s = FakeStepper()
    s.graphs = StepGraphs(None, "graphs switched off (graphs=False)")
    s.step(100)
    assert s.launched == 100 and s.graphs.error == "graphs switched off (graphs=False)"
