"""``preconditioner="auto"`` on a user's matrix (:func:`hpcsolve.fem.solve`, its default): Jacobi-PCG or algebraic
multigrid, chosen while the solve runs from what it measures, so that the choice costs little more than the better of
the two.

Neither is better everywhere: the V-cycle's set-up (and an iteration's level sweeps) is paid back only where Jacobi-PCG
needs many iterations. So the solve starts as Jacobi-PCG (no set-up; its work is kept whatever follows) and weighs at
decision points (PROBE_ITERATIONS iterations, then about a quarter more each time, on multiples of the run's block so
that the probe's blocks, and so its count, are plain Jacobi-PCG's: :func:`decision_points`):

* Jacobi-PCG's remaining iterations (:class:`Probe`), the smaller of two predictions. (a) CG's bound
  0.5 sqrt(kappa) ln(2 r / rtol), kappa the Lanczos estimate of kappa(D^-1 A) from the CG coefficients (alpha, beta):
  the extreme Ritz values lie inside the spectrum, so it is a lower bound; the bound itself is pessimistic on a
  clustered spectrum (coefficient jumps: a few isolated eigenvalues). (b) The residual's recent rate
  (:func:`recent_rate`, over the second half of the iterations so far) extended to rtol, which is pessimistic where
  CG's convergence still speeds up (the 3D Laplacian). Both are far low while the smallest Ritz value has not
  converged: it approaches lambda_min from above as about lambda_max / k^2 whatever lies below, so the Lanczos kappa
  grows as k^2 and says only that CG has not yet seen the bottom of the spectrum. The probe measures that growth
  (kappa_k against kappa at k/2, :func:`ritz_growth`) and multiplies the prediction by up to UNSEEN_FACTOR where it
  is k^GROWTH_UNSEEN or faster (none at k^GROWTH_SEEN or slower: the Ritz value has settled). On the generated AMG
  family (docs/measured/amg_family_auto_cpu_2026-12-07.md) the plain prediction after 128 iterations was 2.2-3.7x
  low on most 2D members, whose kappa still grew as k^1.7-2.2, within 10% on the 3D Laplacians, settled there:
  doubling buys the early switch that the 1.3x target needs, and stays a low estimate on most.
* the cost of each (:class:`CostModel`): seconds per iteration of the run-time estimate
  (``hpcsolve.fem.estimate.seconds_per_iteration``), the amg spec's set-up seconds (``cost.setup_s`` by backend kind,
  ``hpcsolve.fem.linalg.precond.registry``), AMG iterations from its ``cost.fixed_iterations`` (a count for rtol 1e-10
  without calibration: conservative), counted from the initial residual: the probe's iterate has a small residual
  but a smooth error, which took the V-cycle 0.45-1.05 of its iterations from zero (the same document).

Where Jacobi-PCG's predicted remaining time exceeds the AMG set-up and iterations, the hierarchy is set up and AMG-PCG
continues from the iterate (only the Krylov space is lost); else Jacobi-PCG goes on in the same recurrences (no
restart) to the next point. A late switch costs the Jacobi iterations run before it, as renting too long does; a wrong
one would cost the set-up. After AMG-PCG's first CHECK_CYCLES iterations the rate of their second half is compared
(the first cycles remove the easy error fast): where AMG's remaining time is above BACK_FACTOR x Jacobi's prediction,
the solve goes back to Jacobi-PCG (the set-up is sunk: only a clear loss is worth the restart). A matrix so small that
n Jacobi-PCG iterations (CG's most in exact arithmetic) cost less than the set-up runs Jacobi-PCG without decisions.

Mixed precision (cg-reliable, ir-restarted) probes with float32 Jacobi-PCG, then restarts its own method from the
probe's float64 iterate with the preconditioner chosen, where AMG pays, Jacobi clearly does (MIXED_STAY_MARGIN) or
the residual is below MIXED_PROBE_FLOOR; the restart costs about the probe's iterations.

A case on a generator mesh knows its grid: there ``registry.choose_auto`` picks geometric multigrid (mg) by size, as
before; a user's matrix has no grid (``Multigrid("mg", grid=...)`` asks for mg).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import time
from dataclasses import dataclass

import numpy as np

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.cg_decisions import Breakdown, lanczos_extremes
from hpcsolve.fem.linalg.cg_options import F64
from hpcsolve.fem.linalg.cg_run import SolveState, residual_scale, run_cg
from hpcsolve.fem.linalg.precond import registry
from hpcsolve.fem.linalg.precond.base import Preconditioner

#: the first decision point: iterations of Jacobi-PCG before its rate and Ritz values are weighed
PROBE_ITERATIONS = 64
#: decision points are multiples of the run's block (``check_every``, this by default): a decision point inside a
#: block would split it, so that auto's Jacobi-PCG stopped up to a block away from plain Jacobi-PCG's count
POINT_STEP = 64
#: the Lanczos kappa's growth exponent since half the iterations (:func:`ritz_growth`): at or below GROWTH_SEEN the
#: smallest Ritz value has settled (the prediction stands), at or above GROWTH_UNSEEN it still falls as lambda_max / k^2
#: does while lambda_min is unseen (the prediction x UNSEEN_FACTOR); in between, linearly
GROWTH_SEEN, GROWTH_UNSEEN = 1.0, 1.5
UNSEEN_FACTOR = 2.0
#: residuals averaged (geometrically) at each end of the window of the recent rate
RATE_WINDOW = 4
#: the rtol that the V-cycle's ``cost.fixed_iterations`` is counted for (hpcsolve.fem.estimate: rtol 1e-10)
CYCLE_DECADES = 10
#: AMG-PCG iterations after the switch whose measured rate is compared with Jacobi-PCG's prediction
CHECK_CYCLES = 8
#: back to Jacobi-PCG only where AMG's predicted remaining time is above this multiple of Jacobi's
BACK_FACTOR = 2.0
#: mixed precision: the float32 probe stops deciding (and the mixed method restarts) below this relative residual, or
#: where Jacobi-PCG's predicted time is below this fraction of AMG's (a restart loses about the probe's iterations:
#: the sooner the better where the answer is clear)
MIXED_PROBE_FLOOR = 1e-3
MIXED_STAY_MARGIN = 0.25
#: the cost model's nonzeros per row: the estimate models 7 (a scalar field) or 14 (elasticity); the nearer is taken
SCALAR_ROW_NNZ_BELOW = 10.5


#: the run-time estimate's model (seconds of an iteration, the backend's kind), asked by name as the registry holds the
#: multigrid class: hpcsolve.fem.estimate imports the solve API (through hpcsolve.fem.reference), which runs this
ESTIMATE_MODULE = "hpcsolve.fem.estimate"


def _estimate(attr: str):
    return getattr(importlib.import_module(ESTIMATE_MODULE), attr)


def decision_points(first: int = PROBE_ITERATIONS, step: int = POINT_STEP):
    """Iteration counts at which the probe weighs: first, then about a quarter more each time (multiples of step)."""
    k = -(-first // step) * step
    while True:
        yield k
        k += step * max(1, round(k / 4 / step))


@dataclass(frozen=True)
class CostModel:
    """Seconds of the two candidates on one matrix and backend kind ("cpu" or "gpu"), from the run-time estimate's
    model (nothing is timed: two solves of one matrix decide alike): ``probe_s`` one Jacobi-PCG iteration,
    ``cycle_s`` one AMG-PCG iteration, ``setup_s`` the AMG set-up, ``cycle_per_decade`` AMG iterations per decade of
    residual reduction."""

    kind: str
    probe_s: float
    cycle_s: float
    setup_s: float
    cycle_per_decade: float

    @classmethod
    def of(cls, kind: str, policy, unknowns: int, nnz: int, coarse_size: int = 400) -> "CostModel":
        ncomp = 1 if nnz <= SCALAR_ROW_NNZ_BELOW * unknowns else 2
        probe, cycle = registry.get(registry.AUTO_PROBE), registry.get(registry.AUTO_CYCLE)
        fixed, per_unknown = cycle.cost.setup_s.get(kind, (0.0, 0.0))
        per_iteration = _estimate("seconds_per_iteration")
        return cls(kind, per_iteration(kind, policy, probe, unknowns, ncomp, coarse_size),
                   per_iteration(kind, policy, cycle, unknowns, ncomp, coarse_size),
                   fixed + per_unknown * unknowns, cycle.cost.fixed_iterations / CYCLE_DECADES)

    @classmethod
    def of_matrix(cls, A, policy, coarse_size: int = 400) -> "CostModel":
        """The model for a prepared matrix (``DeviceCSR``: its unknowns, nonzeros and backend's kind)."""
        kind = _estimate("backend_kind")(A.backend)
        return cls.of(kind, policy, A.global_n, int(round(A.row_nnz * A.global_n)), coarse_size)

    def cycle_iterations(self, rtol: float) -> int:
        """AMG-PCG iterations to rtol after a switch: counted from the initial residual, whatever the probe's (its
        iterate's error is smooth: what is left takes the V-cycle about as long as from zero; module docstring)."""
        return max(1, math.ceil(self.cycle_per_decade * math.log10(max(1.0 / rtol, 1.0))))

    def cycle_seconds(self, rtol: float) -> float:
        """The AMG set-up and its iterations to rtol."""
        return self.setup_s + self.cycle_iterations(rtol) * self.cycle_s

    def weigh(self, probe: "Probe", rtol: float) -> tuple[bool, float, float]:
        """(whether AMG pays, Jacobi-PCG's predicted remaining seconds, AMG's set-up and iterations in seconds)."""
        jacobi_s = probe.remaining * self.probe_s
        cycle_s = self.cycle_seconds(rtol)
        return jacobi_s > cycle_s, jacobi_s, cycle_s


@dataclass(frozen=True)
class Probe:
    """What k Jacobi-PCG iterations tell: ``kappa`` the Lanczos estimate of kappa(D^-1 A) (a lower bound: the extreme
    Ritz values lie inside the spectrum), ``rate`` the residual's recent ln-reduction per iteration
    (:func:`recent_rate`), ``residual`` the current relative residual, ``growth`` the Lanczos kappa's growth exponent
    since half the iterations (:func:`ritz_growth`), ``factor`` what it multiplies the prediction by
    (:func:`unseen_factor`) and ``remaining`` the predicted iterations to rtol: the smaller of the sqrt(kappa)
    bound's and the rate's (:func:`predict_remaining`) x factor."""

    iterations: int
    kappa: float
    rate: float
    residual: float
    remaining: int
    growth: float = math.nan
    factor: float = 1.0

    @classmethod
    def of(cls, alpha, beta, residuals, rtol: float, earlier=()) -> "Probe":
        """From the CG coefficients and the relative residuals (initial one first, then one per iteration).
        ``earlier``: (iterations, kappa) of earlier probes of the run; the latest at or below half the iterations is
        the growth's reference (else the Lanczos kappa of the first half is computed)."""
        k = len(alpha)
        kappa = _kappa(alpha, beta)
        ref = [(j, kj) for j, kj in earlier if 2 <= j <= k // 2]
        j, kappa_j = ref[-1] if ref else (k // 2, _kappa(alpha[:k // 2], beta[:k // 2]))
        growth = ritz_growth(k, kappa, j, kappa_j)
        factor = unseen_factor(growth)
        res, rate = float(residuals[-1]), recent_rate(residuals)
        remaining = math.ceil(predict_remaining(kappa, rate, res, rtol) * factor)
        return cls(k, kappa, rate, res, remaining, growth, factor)

    def at(self, residual: float, rtol: float) -> int:
        """The predicted Jacobi-PCG iterations from another residual (the same kappa, rate and factor)."""
        return math.ceil(predict_remaining(self.kappa, self.rate, residual, rtol) * self.factor)


def _kappa(alpha, beta) -> float:
    lo, hi = lanczos_extremes(alpha, beta)
    return hi / lo if math.isfinite(lo) and math.isfinite(hi) and lo > 0 else math.nan


def ritz_growth(k: int, kappa: float, j: int, kappa_j: float) -> float:
    """The exponent g of kappa_k = kappa_j (k / j)^g: about 2 while the smallest Ritz value still falls as
    lambda_max / k^2 (lambda_min unseen), towards 0 once it has settled; nan where either kappa is unknown."""
    if not (k > j > 0 and kappa > 0 and kappa_j > 0 and math.isfinite(kappa) and math.isfinite(kappa_j)):
        return math.nan
    return math.log(kappa / kappa_j) / math.log(k / j)


def unseen_factor(growth: float) -> float:
    """What the prediction is multiplied by: 1 at a growth exponent of GROWTH_SEEN or less (or unknown),
    UNSEEN_FACTOR at GROWTH_UNSEEN or more, linear in between."""
    if not math.isfinite(growth):
        return 1.0
    w = min(1.0, max(0.0, (growth - GROWTH_SEEN) / (GROWTH_UNSEEN - GROWTH_SEEN)))
    return 1.0 + (UNSEEN_FACTOR - 1.0) * w


def recent_rate(residuals, window: int = RATE_WINDOW) -> float:
    """The mean ln-reduction per iteration over the second half of ``residuals`` (initial residual first): the early
    iterations remove the easy error fast, so the whole run's mean would promise too much. Each end is the geometric
    mean of ``window`` residuals (CG's residual norm is not monotone)."""
    k = len(residuals) - 1
    if k < 2:
        return math.nan
    logs = np.log(np.maximum(np.asarray(residuals, dtype=np.float64), np.finfo(np.float64).tiny))

    def smooth(i: int) -> float:
        return float(logs[max(0, i - window + 1):i + 1].mean())

    return (smooth(k // 2) - smooth(k)) / (k - k // 2)


def predict_remaining(kappa: float, rate: float, residual: float, rtol: float) -> int:
    """Jacobi-PCG iterations from ``residual`` to rtol: min(0.5 sqrt(kappa) ln(2 residual / rtol), ln(residual / rtol)
    / rate) (either alone where the other is unknown; 0 at rtol)."""
    if not residual > rtol:
        return 0
    guesses = []
    if math.isfinite(kappa) and kappa >= 1:
        guesses.append(0.5 * math.sqrt(kappa) * math.log(2 * residual / rtol))
    if math.isfinite(rate) and rate > 0:
        guesses.append(math.log(residual / rtol) / rate)
    return math.ceil(min(guesses)) if guesses else 0


#: what the probe's decisions say: switch to the V-cycle; stay with Jacobi-PCG (no more decisions); done (the probe
#: converged, stalled, broke down or reached maxiter)
SWITCH, STAY, DONE = "switch", "stay", "done"


class AutoRun:
    """The algorithm of one ``solve(..., preconditioner="auto")`` (``method.algorithm`` for ``cg.run``): Jacobi-PCG
    with decision points, a switch to ``cycle`` where it pays (module docstring). ``method``: the method asked for
    (its algorithm finishes a mixed-precision solve; ``label`` names the report's method); ``probe``: the Jacobi
    preconditioner (the run's ``precond``); ``cycle``: the AMG preconditioner, built, set up at the switch only.
    After the run, :meth:`finish` writes the choice and why into the report."""

    def __init__(self, method, model: CostModel, probe: Preconditioner, cycle: Preconditioner, unknowns: int):
        self.method, self.model, self.probe_pc, self.cycle = method, model, probe, cycle
        self.unknowns = unknowns
        self.chosen = registry.spec_of(probe).name
        self.why = ""
        self.probe: Probe | None = None
        self.facts: dict = {"kind": model.kind, "probe_s": model.probe_s, "cycle_s": model.cycle_s,
                            "setup_model_s": model.setup_s}
        self.switched = False

    @property
    def tiny(self) -> bool:
        """n Jacobi-PCG iterations (CG's most in exact arithmetic) cost less than the V-cycle's set-up."""
        return self.unknowns * self.model.probe_s <= self.model.setup_s

    # -- the algorithm
    def __call__(self, run: SolveState, policy):
        dtype = np.dtype(policy.compute)
        mixed = bool(policy.refinement)
        if self.tiny:
            self.why = (f"auto: {self.chosen} (n = {self.unknowns:,}: n Jacobi-PCG iterations, CG's most in exact "
                        f"arithmetic, {_s(self.unknowns * self.model.probe_s)} <= {_s(self.model.setup_s)} for the "
                        f"{self._cycle_name()} set-up; {self.model.kind} cost model)")
            if mixed:
                return self.method.algorithm(run, policy)
        eng, t = self._probe_engine(run, dtype, mixed)
        if t <= run.opts.rtol:
            self.why = self.why or f"auto: {self.chosen} (the initial guess met rtol)"
            if mixed:
                eng.fold_into(run.x64)
            return run.x64, "true residual met rtol at the initial guess"
        try:
            verdict, reason = (STAY, "") if self.tiny else self._decide(run, eng, mixed)
        except Breakdown as exc:
            verdict, reason = (STAY, "") if mixed else (DONE, f"breakdown: {exc}")
            if mixed:        # its own method runs from the initial guess (and falls back to float64 where it must)
                run.low.fill_zero(eng.x)
                eng.iterations = exc.iteration
                self.why = (f"auto: {self.chosen} (the float32 probe broke down at iteration {exc.iteration}, "
                            f"{exc.kind}: {self.method.name} runs from the initial guess)")
                return self._finish_mixed(run, policy, eng, verdict, reason, restart_note=False)
        if mixed:
            return self._finish_mixed(run, policy, eng, verdict, reason)
        if verdict == SWITCH:
            return self._switch(run, eng, dtype)
        if verdict == STAY:
            reason = self._run_to_end(run, eng)
        run.report.iterations = eng.iterations
        run.report.kappa_estimate = eng.kappa()
        return eng.x, reason

    def _probe_engine(self, run: SolveState, dtype, mixed: bool):
        """The Jacobi-PCG engine from run.x64, its initial residual recorded; mixed: float32 recurrences whose x is the
        correction (folded into x64 after the probe), as cg-reliable's. Returns (engine, true relative residual)."""
        t = run.true_residual(run.x64)
        if mixed:
            eng = run.engine(dtype)
            eng.set_residual_from(run.x64, run.b, precondition=False, scale=residual_scale(t * run.bnorm))
            eng.start_from_r()
        else:
            eng = _continue(run, dtype, 0)
        run.rec.append(t)
        run.add_true(0, t)
        return eng, t

    def _decide(self, run: SolveState, eng, mixed: bool) -> tuple[str, str]:
        """Jacobi-PCG from point to point: (SWITCH, ""), (STAY, "") (no more decisions: the rest is Jacobi-PCG's) or
        (DONE, reason) (converged, stalled or maxiter within the probe). Mixed: the float32 probe never judges its
        x (the correction) against b: no true-residual checks (target -1), the mixed method does that after it."""
        opts = run.opts
        target = -1.0 if mixed else None
        start = len(run.rec) - 1
        earlier: list[tuple[int, float]] = []
        for point in decision_points(step=max(1, eng.K)):
            end = min(_aligned(point, opts.true_every), opts.maxiter)
            if end <= eng.iterations:
                continue
            reason, done = run_cg(run, eng, end - eng.iterations, eng.iterations, target)
            if done or eng.iterations < end or end >= opts.maxiter:
                self.why = self.why or f"auto: {self.chosen} (Jacobi-PCG ended within its {end}-iteration probe)"
                return DONE, reason
            probe = Probe.of(eng.alpha, eng.beta, run.rec[start:], opts.rtol, earlier)
            earlier.append((probe.iterations, probe.kappa))
            pays, jacobi_s, cycle_s = self.model.weigh(probe, opts.rtol)
            decision = dict(iterations=probe.iterations, kappa_lanczos=probe.kappa, rate=probe.rate,
                            kappa_growth=probe.growth, unseen_factor=probe.factor,
                            predicted_jacobi_iterations=probe.remaining, predicted_jacobi_s=jacobi_s,
                            predicted_cycle_s=cycle_s)
            self.facts.setdefault("decisions", []).append(decision)
            self.facts.update(decision)
            unseen = (f" (x{probe.factor:.2g}: the Lanczos kappa still grows as k^{probe.growth:.2g})"
                      if probe.factor > 1 else "")
            self.why = (f"auto: {self._cycle_name() if pays else self.chosen} (probe: {probe.iterations} Jacobi-PCG "
                        f"iterations, kappa(D^-1 A) >= {probe.kappa:.2g} (Lanczos), predicted {probe.remaining} more "
                        f"Jacobi-PCG iterations{unseen} {_s(jacobi_s)} {'>' if pays else '<='} {_s(cycle_s)} for "
                        f"the {self._cycle_name()} set-up and {self.model.cycle_iterations(opts.rtol)} iterations; "
                        f"{self.model.kind} cost model)")
            if pays:
                self.probe = probe
                return SWITCH, ""
            if run.rec[-1] <= opts.rtol or (mixed and (jacobi_s <= MIXED_STAY_MARGIN * cycle_s
                                                        or run.rec[-1] <= MIXED_PROBE_FLOOR)):
                return STAY, ""
        raise AssertionError("decision_points is endless")   # pragma: no cover

    def _run_to_end(self, run: SolveState, eng) -> str:
        try:
            reason, _ = run_cg(run, eng, run.opts.maxiter - eng.iterations, eng.iterations)
        except Breakdown as exc:
            reason = f"breakdown: {exc}"
        return reason

    # -- the switch
    def _set_up_cycle(self, run: SolveState, at: int) -> bool:
        """The V-cycle set up and made the run's preconditioner; False (said in the reason) where its set-up refuses
        the matrix."""
        t0 = time.perf_counter()
        try:
            self.cycle.setup(run.A)
        except CaseError as exc:
            self.why += f"; the {self._cycle_name()} set-up refused the matrix ({exc}): {self.chosen} goes on"
            return False
        run.low.sync()
        self.cycle.cycles = 0
        self.facts.update(setup_s=time.perf_counter() - t0, switched_at=at)
        run.precond = self.cycle
        self.chosen, self.switched = registry.spec_of(self.cycle).name, True
        return True

    def _switch(self, run: SolveState, eng, dtype):
        """AMG-PCG from the probe's iterate; back to Jacobi-PCG where its first iterations' rate says AMG loses (or
        where its set-up refuses the matrix: Jacobi-PCG goes on)."""
        low, opts = run.low, run.opts
        if not self._set_up_cycle(run, eng.iterations):
            reason = self._run_to_end(run, eng)
            run.report.iterations = eng.iterations
            run.report.kappa_estimate = eng.kappa()
            return eng.x, reason
        if dtype != F64:
            low.scale_copy(eng.x, run.x64, 1.0)
        cyc = _continue(run, dtype, eng.iterations)
        try:
            reason, done = run_cg(run, cyc, min(CHECK_CYCLES, opts.maxiter - cyc.iterations), cyc.iterations)
            m = cyc.iterations - eng.iterations
            if not done and m >= CHECK_CYCLES and self._back(run, m):
                if dtype != F64:
                    low.scale_copy(cyc.x, run.x64, 1.0)
                run.precond, self.chosen, self.switched = self.probe_pc, registry.spec_of(self.probe_pc).name, False
                cyc = _continue(run, dtype, cyc.iterations)
                reason = self._run_to_end(run, cyc)
            elif not done and cyc.iterations < opts.maxiter:
                reason = self._run_to_end(run, cyc)
        except Breakdown as exc:
            reason = f"breakdown: {exc}"
        run.report.iterations = cyc.iterations
        run.report.kappa_estimate = cyc.kappa()
        return cyc.x, reason

    def _back(self, run: SolveState, m: int) -> bool:
        """Whether AMG's measured rate over the second half of its first m iterations (:func:`recent_rate`: the first
        cycles remove the easy error fast) predicts clearly more time than Jacobi-PCG's prediction."""
        res, rtol = run.rec[-1], run.opts.rtol
        rate = recent_rate(run.rec[-(m + 1):])
        cycle_s = (math.log(res / rtol) / rate if rate > 0 else math.inf) * self.model.cycle_s
        jacobi_s = self.probe.at(res, rtol) * self.model.probe_s
        factor = math.exp(-rate) if math.isfinite(rate) else math.nan
        self.facts["cycle_rate"] = factor
        if not cycle_s > BACK_FACTOR * jacobi_s:
            return False
        self.why += (f"; {self._cycle_name()}'s iterations {m // 2}-{m} reduced the residual {factor:.2f}x each: "
                     f"~{_s(cycle_s)} more against Jacobi-PCG's ~{_s(jacobi_s)}: back to {self.probe_pc.name}")
        return True

    # -- mixed precision
    def _finish_mixed(self, run: SolveState, policy, eng, verdict: str, reason: str, restart_note: bool = True):
        """The float32 probe folded into x64; the mixed method restarted from it with the preconditioner chosen (its
        iterations and records counted after the probe's)."""
        eng.fold_into(run.x64)
        k = eng.iterations
        if verdict == DONE:
            run.report.iterations = k
            run.report.kappa_estimate = eng.kappa()
            return run.x64, reason
        if verdict == SWITCH:
            self._set_up_cycle(run, k)           # else (refused) the mixed method restarts with Jacobi
        n_rec, n_true = len(run.rec), len(run.true_its)
        opts = run.opts
        run.opts = dataclasses.replace(opts, maxiter=max(opts.maxiter - k, 1))
        run.report.iterations = 0
        try:
            x, reason = self.method.algorithm(run, policy)
        finally:
            run.opts = opts
        del run.rec[n_rec:n_rec + 1]              # the restart's initial residual: the probe's last iterate's again
        run.true_its[n_true:] = [i + k for i in run.true_its[n_true:]]
        run.report.iterations += k
        if restart_note:
            self.why += f"; {self.method.name} restarted from the float32 probe's iterate after {k} iterations"
        return x, reason

    # -- the report
    def finish(self, report) -> None:
        """The choice and why in the report (``chosen``, ``chosen_why``, a note, ``preconditioner["auto"]``); where
        AMG was kept, the method and preconditioner as an amg solve reports them."""
        if self.switched:
            report.method = self.method.label(self.cycle)
            report.preconditioner = self.cycle.info()
            if report.preconditioner.get("scaling"):
                report.notes.append(report.preconditioner["scaling"])
            if report.preconditioner.get("flexible"):
                report.notes.append("flexible CG (beta = -z.Aq / p.Aq): the V-cycle need not be exactly symmetric")
        note(report, self.chosen, self.why)
        report.preconditioner = dict(report.preconditioner, auto=dict(self.facts, chosen=self.chosen))

    def _cycle_name(self) -> str:
        return registry.spec_of(self.cycle).name


def fixed_reason(situation: registry.Situation, spec: registry.PreconditionerSpec) -> str:
    """Why "auto" is ``spec`` whatever the matrix (``registry.choose_fixed``: the method's own preconditioner, or the
    one a named method means, or several MPI ranks), as the report says it."""
    m = situation.method
    if m.preconditioner is not None:
        why = f"method {m.name!r} {m.why}"
    elif situation.named and m.named_preconditioner is not None:
        why = f"method {m.name!r} named: {spec.summary}"
    else:
        why = f"{situation.ranks} MPI ranks: the multigrid hierarchy is not distributed"
    return f"auto: {spec.name} ({why})"


def note(report, chosen: str, why: str) -> None:
    """What "auto" chose and why, in the report (``chosen``, ``chosen_why``, a note)."""
    report.chosen, report.chosen_why = chosen, why
    report.notes.append(why)


def _continue(run: SolveState, dtype, iterations: int):
    """A CG engine of run.precond from run.x64 (r = b - A x64, p = M^-1 r), its count continuing at ``iterations``
    (as a float64 fallback continues)."""
    if dtype == F64:
        eng = run.engine(F64, x=run.x64)
    else:
        eng = run.engine(dtype)
        run.low.scale_copy(run.x64, eng.x, 1.0)
    eng.set_residual_from(run.x64, run.b, precondition=False)
    eng.start_from_r()
    eng.iterations = iterations
    return eng


def _aligned(point: int, true_every: int) -> int:
    """A decision point moved up to a multiple of ``true_every`` (the true residual's records stay on its multiples:
    ``run_cg`` counts them from where it starts)."""
    return -(-point // true_every) * true_every if true_every else point


def _s(seconds: float) -> str:
    """Seconds as the reason writes them: 0.12 s, 3.4 ms."""
    return f"{seconds:.2g} s" if seconds >= 0.1 else f"{seconds * 1e3:.2g} ms"


def method_for(method, run: AutoRun):
    """``method`` (a :class:`hpcsolve.fem.linalg.methods.Method`) with ``run`` as its algorithm: what ``cg.run`` is
    given for an "auto" solve (its name and label stay those of the probe's method)."""
    return dataclasses.replace(method, algorithm=run)

