"""The float64 reference of an FEM run: SciPy's SuperLU solve of the run's own system (``hpcsolve.fem.solve``
with method "spsolve": :func:`hpcsolve.fem.api.factor_solve`), the run's distance from it and its kind (metrics
"reference").

On a GPU backend the factorization runs in a thread beside what follows the solve (the error norms, the probe, the
figures' imports: ``runner.run``): SuperLU releases the GIL (a heat plate of 166 k unknowns: a 1.3-1.6 s reference
after a 0.4 s GPU run). What holds the GIL (the ordering and permutation, the residual check) stays on the run's
thread (:class:`hpcsolve.fem.api.DirectSolve`). It starts after the solve, not beside it: on the H200 machine a
factorization beside the solve took its AMG set-up from 0.2-0.34 s to 0.36-0.49 s, and the solve's timings are the
figures a run reports. A run that fails while it factorizes waits for it (a ``compare`` going on to its next run
must not time that beside a factorization). On a CPU backend it runs in line, as before. ``timings["reference_s"]``
is the reference's own time either way; ``timings["reference_wait_s"]`` what the run spent on it on its own thread
(its preparation, the wait, the residual check; all of it in line)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from hpcsolve.core import scaled
from hpcsolve.fem.api import DirectSolve, solve
from hpcsolve.fem.discrete import problem as prob
from hpcsolve.fem.linalg.matrix import DeviceCSR

#: the note a reference made in a thread beside the run's work after a GPU solve adds to its kind
BESIDE = "beside the run's work after the GPU solve"


def host_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):        # not Linux
        return os.cpu_count() or 1


def with_reference(before_s: float, ref_s: float, beside_s: float, overlap: bool) -> float:
    """Seconds of a run whose float64 reference (``ref_s``) follows work of ``before_s``: in line it adds to the
    ``beside_s`` of work after it; beside that work (``overlap``) the longer of the two counts."""
    return before_s + (max(ref_s, beside_s) if overlap else ref_s + beside_s)


def beside(backend, ranks: int = 1) -> bool:
    """Whether a run on ``backend`` factorizes its reference beside its solve: a GPU backend on a real device (the
    CUDA simulator runs on the CPU and needs the GIL), one rank, two host cores or more."""
    return bool(backend.gpu) and not backend.simulator and ranks <= 1 and host_cores() >= 2


class Reference:
    """The float64 direct solve of ``disc``'s system. ``beside``: prepared now on this thread, factorized in a
    daemon thread from :meth:`start`; else solved in line when :meth:`metrics` asks."""

    def __init__(self, disc, rtol: float, beside: bool):
        self.A = disc.A.to_scipy() if isinstance(disc.A, DeviceCSR) else disc.A     # (a host copy of a device matrix)
        self.b, self.rtol = np.asarray(disc.b, dtype=np.float64), rtol
        self.out = self.error = self.thread = None
        self.seconds = 0.0               # its own work, on whichever thread
        self.ran_in = ""                 # the name of the thread that factorized
        self.direct = None
        self.prepare_s = 0.0             # its work on the run's thread before the factorization
        self.wait_s = 0.0                # what the run spent on it on its own thread (set by metrics)
        if beside and scaled.peak(self.b) > 0.0:        # (b = 0: x = 0, solved in line)
            t0 = time.perf_counter()
            self.direct = DirectSolve(self.A, self.b, rtol)           # ordering, permutation: GIL work, here
            self.prepare_s = time.perf_counter() - t0
            self.seconds += self.prepare_s

    def start(self) -> None:
        """Start the factorization beside the caller (nothing where it is made in line)."""
        if self.direct is not None and self.thread is None:
            self.thread = threading.Thread(target=self._factorize, name="hpcsolve-fem-reference", daemon=True)
            self.thread.start()

    def running(self) -> bool:
        """Whether the factorization beside the solve has not finished yet."""
        return self.thread is not None and self.thread.is_alive()

    def abandon(self) -> None:
        """The run failed: wait for the factorization (it cannot be stopped), so that nothing timed after the run
        shares the host with it."""
        if self.thread is not None:
            self.thread.join()

    def _factorize(self) -> None:
        self.ran_in = threading.current_thread().name
        t0 = time.perf_counter()
        try:
            self.direct.factorize()            # SuperLU: the GIL released
        except BaseException as exc:           # raised again in the run's thread by metrics()
            self.error = exc
        self.seconds += time.perf_counter() - t0

    @property
    def solution(self):
        """The reference's solution of the free unknowns (float64, host), once :meth:`metrics` made it; else None.
        ``hpcsolve.fem.judge`` measures the run's precision error against it."""
        return None if self.out is None else self.out[0]

    def _in_line(self) -> None:
        self.ran_in = threading.current_thread().name
        t0 = time.perf_counter()
        x, rep = solve(self.A, self.b, precision="fp64", method="spsolve", rtol=self.rtol)
        kind = next((n.removeprefix("direct solve: ") for n in rep.notes if n.startswith("direct solve: ")), "")
        self.out = x, rep.true_residual, kind
        self.seconds += time.perf_counter() - t0

    def metrics(self, disc, x, timings: dict) -> dict:
        """The reference's metrics for the solution ``x``; sets timings reference_s and reference_wait_s (what the
        run spent on it on its own thread: its preparation, the wait, the residual check). The reference is made
        once: a second call gives the same metrics."""
        if self.out is None:
            t0 = time.perf_counter()
            if self.direct is None:
                self._in_line()
            else:
                self.start()                       # (where the caller did not)
                self.thread.join()
                if self.error is not None:
                    raise self.error
                t1 = time.perf_counter()
                self.out = self.direct.finish()    # the residual check (and the general factorization where needed)
                self.seconds += time.perf_counter() - t1
            self.wait_s = self.prepare_s + time.perf_counter() - t0
        timings["reference_wait_s"] = self.wait_s
        timings["reference_s"] = self.seconds
        x_ref, true, kind = self.out
        where = "" if self.thread is None else f" ({BESIDE})"
        metrics = {"reference": f"made: float64 {kind}{where}", "reference_true_residual": true,
                   "error_vs_fp64_reference": _relative_error(x, x_ref)}
        if disc.exact is not None:
            metrics["reference_error_l2"] = prob.error_norms(disc.mesh, disc.full_solution(x_ref), *disc.exact)[0]
        return metrics


def _relative_error(x, x_ref) -> float:
    """||x - x_ref|| / ||x_ref|| by scaled norms (a solution of 1e-300 has norms that a sum of squares loses: the
    error read 0.0); the absolute error where x_ref = 0."""
    num, den = scaled.norm2(x - x_ref), scaled.norm2(x_ref)
    return scaled.ratio(num, den) if den > 0 else num
