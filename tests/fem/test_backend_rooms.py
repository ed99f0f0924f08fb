"""The FEM's GPU backends in rooms by job (issue 53): neither GPU backend imports the other (what both need is in
the neutral ``kernels_common``; Numba-CUDA reaches CuPy's ops for its set-up twin through the backend registry),
and the Numba low ops are split by job (``_CupyStream``, ``_LevelKernels``, ``NumbaOps``) without losing a method.

Everything here runs on the CPU: the import graph is read from the source (``tests/arch_util.py``), and the CuPy
stream capture and the twin lookup are driven with stand-in streams and backends."""

from __future__ import annotations

import contextlib
import inspect
import subprocess
import sys

import arch_util
import pytest

from hpcsolve.fem.linalg import kernels_common, kernels_cupy, kernels_numba, lowops

LINALG = "hpcsolve.fem.linalg"
NUMBA, CUPY, COMMON = f"{LINALG}.kernels_numba", f"{LINALG}.kernels_cupy", f"{LINALG}.kernels_common"
GRAPH = arch_util.graph()


def _reach(start: str) -> set[str]:
    """Every hpcsolve module ``start`` imports, directly or through others (late imports included)."""
    arrows, seen, todo = GRAPH.arrows(late=True), set(), [start]
    while todo:
        for n in arrows[todo.pop()] - seen:
            seen.add(n)
            todo.append(n)
    return seen


def test_neither_gpu_backend_imports_the_other():
    assert CUPY not in _reach(NUMBA)
    assert NUMBA not in _reach(CUPY)


def test_the_shared_room_imports_no_backend_and_both_backends_use_it():
    assert COMMON in GRAPH.arrows()[NUMBA] and COMMON in GRAPH.arrows()[CUPY]
    assert not {m for m in _reach(COMMON) if m.startswith(f"{LINALG}.kernels_")}
    assert _reach(COMMON) <= {"hpcsolve.core.backends"} | _reach("hpcsolve.core.backends")


def test_importing_the_numba_backend_loads_neither_cupy_nor_its_backend():
    script = ("import sys, hpcsolve.fem.linalg.kernels_numba\n"
              f"print(sorted(m for m in sys.modules if m in ('cupy', {CUPY!r})))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_the_launch_geometry_is_shared():
    assert kernels_numba.THREADS == kernels_cupy.THREADS == kernels_common.THREADS == 256
    assert kernels_numba.LAUNCH_BOUNDS == (256, 8)
    assert kernels_common.max_blocks(132) == 1056 and kernels_common.max_blocks(132, 128) == 2112


# ---- NumbaOps split by job
def _abstract_ops() -> list[str]:
    """The LowOps methods a backend must implement (their body raises NotImplementedError)."""
    return sorted(name for name, fn in vars(lowops.LowOps).items()
                  if inspect.isfunction(fn) and "raise NotImplementedError" in inspect.getsource(fn))


@pytest.mark.parametrize("cls", [kernels_numba.NumbaOps, kernels_cupy.CupyOps], ids=["numba", "cupy"])
def test_each_gpu_backend_implements_every_low_op(cls):
    names = _abstract_ops()
    assert len(names) == 23
    assert [n for n in names if getattr(cls, n) is getattr(lowops.LowOps, n)] == []


def test_numba_ops_are_split_by_job():
    mro = kernels_numba.NumbaOps.__mro__
    assert mro[:4] == (kernels_numba.NumbaOps, kernels_numba._CupyStream, kernels_numba._LevelKernels,
                       lowops.LowOps)
    owner = {name: next(c for c in mro if name in vars(c)).__name__
             for name in ("csr_apply", "mg_smooth", "capture", "launch_twin", "sparse_modules", "spmv_dot", "_go",
                          "set_up_on_cupy")}
    assert owner == {"csr_apply": "_LevelKernels", "mg_smooth": "_LevelKernels", "capture": "_CupyStream",
                     "launch_twin": "_CupyStream", "sparse_modules": "_CupyStream", "spmv_dot": "NumbaOps",
                     "_go": "NumbaOps", "set_up_on_cupy": "_CupyStream"}
    for cls in mro[:3]:
        lines, _ = inspect.getsourcelines(cls)
        assert len(lines) <= 250, (cls.__name__, len(lines))


# ---- the CuPy stream capture both backends use, with a stand-in stream
class _Stream:
    def __init__(self, fail_end=False):
        self.calls, self.fail_end = [], fail_end

    def synchronize(self):
        self.calls.append("sync")

    def begin_capture(self):
        self.calls.append("begin")

    def end_capture(self):
        self.calls.append("end")
        if self.fail_end:
            raise RuntimeError("capture invalidated")
        launched = self.launched = []

        class Graph:
            def launch(self, stream=None):
                launched.append(stream)

        return Graph()

    def __enter__(self):
        self.calls.append("enter")

    def __exit__(self, *exc):
        self.calls.append("exit")


def test_capture_graph_records_and_replays_on_the_stream():
    s, ran = _Stream(), []
    launch, err = kernels_common.capture_graph(s, lambda: ran.append(1), s)
    assert err is None and ran == [1] and s.calls == ["enter", "sync", "begin", "end", "exit"]
    launch()
    launch()
    assert s.launched == [s, s]


def test_capture_graph_reports_the_first_cause_and_always_ends_the_capture():
    s = _Stream(fail_end=True)
    launch, err = kernels_common.capture_graph(s, lambda: 1 / 0, contextlib.nullcontext())
    assert launch is None and isinstance(err, ZeroDivisionError) and s.calls == ["sync", "begin", "end"]
    launch, err = kernels_common.capture_graph(_Stream(fail_end=True), lambda: None, contextlib.nullcontext())
    assert launch is None and str(err) == "capture invalidated"


def _bare_numba_ops(**attrs):
    """A NumbaOps with only the attributes the CuPy side reads (no device, no numba)."""
    ops = object.__new__(kernels_numba.NumbaOps)
    ops.graphs, ops.graph_error, ops._twin = True, None, None
    ops._cp = ops._cp_stream = None
    ops._cp_device = contextlib.nullcontext()
    for k, v in attrs.items():
        setattr(ops, k, v)
    return ops


def test_numba_capture_falls_back_and_says_why():
    ops = _bare_numba_ops(_cp_stream=_Stream(fail_end=True))
    assert ops.capture(lambda: None) is None
    assert ops.graph_error == "CUDA graph capture failed, launching directly (RuntimeError: capture invalidated)"
    ops._cp_stream = _Stream()
    launch = ops.capture(lambda: None)
    assert launch is not None and ops.graph_error is None
    launch()
    assert ops._cp_stream.launched == [ops._cp_stream]


def test_cupy_capture_raises_the_first_cause():
    ops = object.__new__(kernels_cupy.CupyOps)
    ops.graphs, ops.stream = True, _Stream()
    with pytest.raises(ZeroDivisionError):
        ops.capture(lambda: 1 / 0)
    assert ops.stream.calls == ["enter", "sync", "begin", "end", "exit"]
    ops.stream = _Stream()
    ops.capture(lambda: None)()
    assert ops.stream.launched == [ops.stream]


# ---- the set-up twin: CuPy's ops from the backend registry, not by import
class _Backend:
    def __init__(self):
        self.asked = []

    def piece(self, kind):
        def factory(**kw):
            self.asked.append((kind, kw))
            return "the twin ops"
        return factory


def test_the_twin_comes_from_the_registry_of_the_arrays_owner(monkeypatch):
    fake_cupy = type("fake_cupy", (), {"asarray": staticmethod(lambda a: a), "ndarray": object})
    backend, stream = _Backend(), object()
    owners = {fake_cupy: backend}
    monkeypatch.setattr(kernels_common, "owner_of", owners.get)
    monkeypatch.setattr(kernels_numba, "owner_of", owners.get)
    ops = _bare_numba_ops(_cp=fake_cupy, _cp_stream=stream)
    twin, view = ops.launch_twin()
    assert twin == "the twin ops" and view is fake_cupy.asarray
    assert backend.asked == [("fem.low_ops", {"graphs": False, "stream": stream})]
    assert ops.launch_twin()[0] == "the twin ops" and len(backend.asked) == 1      # made once
    assert kernels_common.ops_on_stream(object(), stream) is None                   # no backend owns the module
    monkeypatch.setattr(ops, "set_up_on_cupy", False)
    assert ops.launch_twin() is None
