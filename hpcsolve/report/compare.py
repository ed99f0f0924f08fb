"""Accuracy-vs-speed comparison of one case across backends x precisions (x preconditioners, FEM).

Every configuration runs the same case; the CPU FP64 reference (NumPy LBM / SciPy-backed FEM)
runs first. For each run the comparison records wall time, throughput, speedup over the reference,
memory, the error of every field against the reference run (relative L2 and relative max), the
drift of that error over the output times, the errors against analytic/published references that
the run itself reports, and (FEM) the true residual and the recursive-vs-true gap.

Timing: every configuration runs once untimed (warm-up: compilation, memory pools, imports), then
at least ``repeats`` (3) timed runs, more while the spread (max - min) / median is above 5% and the
configuration's time budget allows; times are the solver's own (``family.SOLVER_SECONDS``), reported
as median and min-max. Host BLAS/OpenMP threads are pinned for every run (``Backend.run_context``).

Preconditioners (FEM): with ``preconditioners`` every backend x precision runs once per listed name,
with ``solve.preconditioner`` of the case overridden (the same path as ``--set``); a configuration is then
backend/precision/preconditioner everywhere (labels, table, JSON, plots, recommendation). The reference
is the CPU FP64 run with the case's own preconditioner when it is listed, else the first listed; should
that configuration fail (e.g. "mg" on a mesh that is not a structured generator mesh), the next CPU FP64
one is the reference. Without ``preconditioners`` the case's own setting is used (one run per
backend x precision), and the label has no preconditioner part.

Recommendation: the FP64 reference is a candidate like every other run. A run is *acceptable* when it
finished (completed or converged) and its field error (the largest relative L2 error over the fields)
is within the tolerance. A run is recommended over a more accurate one only when it is faster beyond
the measured spread (its slowest timed run is faster than the other's fastest; both timed at least 3 times)
and by at least 10% of the other's median time; otherwise the more
accurate one is recommended. So the answer is never a run slower than the reference, and when no
configuration is measurably faster than the reference it says so and recommends the reference.
Every run gets a verdict saying why it is or is not recommended.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hpcsolve.core import backends as backends_mod
from hpcsolve.core.family import SOLVER_SECONDS
from hpcsolve.core import precision as precision_mod
from hpcsolve.core.cases import CaseBase, load_case
from hpcsolve.core.errors import CaseError, HpcsolveError, OutputError
from hpcsolve.core.results import Result, _jsonable, atomic_path, write_json

DEFAULT_TOLERANCE = 1e-3
DEFAULT_REPEATS = 3          # timed runs per configuration, at least
MAX_REPEATS = 10             # at most, when the spread stays above TARGET_SPREAD
REPEATS_LIMIT = 1000         # largest --repeats: each is a whole run of the case, per configuration
TARGET_SPREAD = 0.05         # (max - min) / median above which more repeats are taken, while the budget allows
MIN_GAIN = 0.10              # a run counts as faster only when its median is also at least 10% lower: 3-6%
#                              between launch-bound GPU runs flipped the cavity's recommendation between runs
MIN_TIMED = 3                # timings each run needs before one can be called faster than another (a spread)
DEFAULT_BUDGET_S = 60.0      # seconds of timed runs per configuration beyond the first `repeats`
OK_STATUS = ("completed", "converged", "not_steady")   # not_steady: ran its full time (fields valid)
REFERENCE = ("numpy", "fp64")
SKIP_FIELDS = {"flags", "u_exact", "error"}  # geometry codes, analytic fields and their errors


@dataclass
class Run:
    backend: str
    precision: str
    status: str
    preconditioner: str | None = None  # FEM, with the preconditioner dimension: the name asked for (part of the label)
    wall_s: float = math.nan          # median solver time: LBM time stepping, FEM solve (without setup/output)
    times: list = field(default_factory=list)   # every timed run's solver time
    total_s: float = math.nan         # whole run including setup
    throughput: dict = field(default_factory=dict)
    memory_bytes: int | None = None
    field_errors: dict = field(default_factory=dict)   # name -> {"rel_l2": .., "rel_max": ..}
    drift: dict = field(default_factory=dict)          # {"time": [...], "rel_l2": [...]} (LBM)
    reference_errors: dict = field(default_factory=dict)  # errors vs analytic/published refs from the run
    residuals: dict = field(default_factory=dict)      # FEM: true residual, gap, iterations
    speedup: float = math.nan
    message: str = ""
    preconditioner_used: str | None = None   # FEM: the preconditioner the run used (``auto`` resolved), from its metrics
    preconditioner_info: dict = field(default_factory=dict)   # FEM multigrid: levels, complexity, setup time, cycles
    reference_run: bool | None = field(default=None, repr=False)   # set by compare(); None: (backend, precision) == REFERENCE
    result: Result | None = field(default=None, repr=False)

    @property
    def is_reference(self) -> bool:
        if self.reference_run is not None:
            return self.reference_run
        return (self.backend, self.precision) == REFERENCE

    @property
    def label(self) -> str:
        """backend/precision, or backend/precision/preconditioner when the preconditioner is a dimension."""
        base = f"{self.backend}/{self.precision}"
        return base if self.preconditioner is None else f"{base}/{self.preconditioner}"

    @property
    def wall_min(self) -> float:
        return min(self.times) if self.times else self.wall_s

    @property
    def wall_max(self) -> float:
        return max(self.times) if self.times else self.wall_s

    @property
    def spread(self) -> float:
        """(max - min) / median of the timed runs."""
        return (self.wall_max - self.wall_min) / self.wall_s if self.wall_s > 0 else math.nan

    def faster_than(self, other: "Run") -> bool:
        """Faster beyond the measured spread (the slowest timed run beats the other's fastest) and by at
        least MIN_GAIN of the other's median; with fewer than MIN_TIMED timings on either side there is no spread
        to go beyond, and nothing counts as faster."""
        if min(len(self.times), len(other.times)) < MIN_TIMED:
            return False
        return self.wall_max < other.wall_min and self.wall_s <= (1.0 - MIN_GAIN) * other.wall_s

    @property
    def error(self) -> float:
        """Largest relative L2 error over the fields against the FP64 reference run."""
        vals = [e["rel_l2"] for e in self.field_errors.values()]
        return max(vals) if vals else math.nan

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k not in ("result", "reference_run")}
        d["label"] = self.label
        d["error"] = self.error
        d["reference"] = self.is_reference
        d["wall_min_s"], d["wall_max_s"] = self.wall_min, self.wall_max
        return _jsonable(d)


def field_error(a: np.ndarray, ref: np.ndarray) -> dict:
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    diff = a - ref
    nref = float(np.linalg.norm(ref))
    mref = float(np.max(np.abs(ref))) if ref.size else 0.0
    return {"rel_l2": float(np.linalg.norm(diff) / nref) if nref > 0 else float(np.linalg.norm(diff)),
            "rel_max": float(np.max(np.abs(diff)) / mref) if mref > 0 else float(np.max(np.abs(diff), initial=0.0))}


def _solver_seconds(res: Result) -> float:
    return float(res.timings.get(SOLVER_SECONDS, math.nan))


def _error(r: "Run") -> float:
    return 0.0 if r.is_reference else r.error


def _more_repeats(times: list[float], repeats: int | None, budget_s: float, extra_s: float = 0.0) -> bool:
    """Another timed run? ``times``: solver times so far; ``extra_s``: wall time already spent on repeats
    beyond the first DEFAULT_REPEATS (whole runs: setup, reference solves, fields), held to ``budget_s``."""
    if repeats is not None:
        return len(times) < repeats
    if len(times) < DEFAULT_REPEATS:
        return True
    med = float(np.median(times))
    spread = (max(times) - min(times)) / med if med > 0 else 0.0
    per_run = extra_s / (len(times) - DEFAULT_REPEATS) if len(times) > DEFAULT_REPEATS else med
    return spread > TARGET_SPREAD and len(times) < MAX_REPEATS and extra_s + per_run <= budget_s


def _throughput(res: Result) -> dict:
    out = {}
    for key in ("mlups", "time_per_iteration_s", "iterations", "time_to_solution_s"):
        for src in (res.timings, res.metrics):
            if key in src and isinstance(src[key], (int, float)):
                out[key] = float(src[key])
                break
    return out


def _reference_errors(res: Result) -> dict:
    return {k: v for k, v in res.metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
            and ("error" in k or "diff" in k or k in ("drag_coefficient", "lift_coefficient", "strouhal", "tip_displacement"))}


def _residuals(res: Result) -> dict:
    keys = ("true_residual", "recursive_residual", "residual_gap", "iterations", "outer_iterations", "converged")
    return {k: res.metrics[k] for k in keys if k in res.metrics}


@dataclass
class Comparison:
    case_name: str
    solver: str
    tolerance: float
    runs: list[Run]
    skipped: dict = field(default_factory=dict)   # label ("backend/precision[/preconditioner]") -> why
    preconditioners: list | None = None           # FEM: the preconditioner dimension (None: the case's own setting)

    @property
    def reference(self) -> Run:
        return next(r for r in self.runs if r.is_reference)

    def acceptable(self, r: Run) -> bool:
        return (r.status in OK_STATUS and math.isfinite(r.wall_s)
                and (r.is_reference or (math.isfinite(r.error) and r.error <= self.tolerance)))

    def recommendation(self) -> dict:
        """The recommended run and why (see the module docstring for the rule)."""
        ok = [r for r in self.runs if self.acceptable(r)]
        if not ok:
            others = [r for r in self.runs if not r.is_reference and math.isfinite(r.error)]
            why = "no run finished within the tolerance"
            if others:
                closest = min(others, key=lambda r: r.error)
                why += f"; the closest is {closest.label} with error {closest.error:.3g} ({closest.status})"
            return {"backend": None, "precision": None, "preconditioner": None, "label": None, "why": why}
        # from the most accurate run down: a less accurate run replaces the choice only when it is
        # measurably faster than the choice so far
        by_accuracy = sorted(ok, key=lambda r: (0.0 if r.is_reference else r.error, r.wall_s))
        best = beaten = by_accuracy[0]
        for r in by_accuracy[1:]:
            if r.faster_than(best):
                best, beaten = r, best
        if best is by_accuracy[0]:
            why = (f"no configuration is measurably faster than {best.label} "
                   f"(median {best.wall_s:.3g} s, {best.wall_min:.3g}-{best.wall_max:.3g}), the most accurate run")
            if any(len(r.times) < MIN_TIMED for r in ok):
                why += (f"; fewer than {MIN_TIMED} timings per run give no spread to compare speeds with "
                        f"(--repeats {MIN_TIMED} or more)")
        else:
            why = (f"measurably faster than {beaten.label} "
                   f"({best.wall_min:.3g}-{best.wall_max:.3g} s against {beaten.wall_min:.3g}-"
                   f"{beaten.wall_max:.3g} s) with field error {best.error:.3g} <= tolerance {self.tolerance:g}")
        return {"backend": best.backend, "precision": best.precision, "preconditioner": best.preconditioner,
                "label": best.label, "error": best.error, "wall_s": best.wall_s, "speedup": best.speedup, "why": why}

    def verdicts(self) -> dict[str, str]:
        """For every run (its label, "backend/precision[/preconditioner]"): why it is or is not the recommendation."""
        rec = self.recommendation()
        chosen = next((r for r in self.runs if r.label == rec["label"]), None)
        out = {}
        for r in self.runs:
            key = r.label
            if r is chosen:
                out[key] = "recommended: " + rec["why"]
            elif r.status == "not_converged":
                true = r.residuals.get("true_residual")
                out[key] = (f"not converged (true residual {true:.2e}): raise solve.maxiter, loosen solve.rtol, or "
                            f"use precision 'mixed' for float64 accuracy" if isinstance(true, (int, float))
                            else "not converged")
            elif r.status not in OK_STATUS:
                out[key] = f"{r.status}: {r.message[:200]}"
            elif not self.acceptable(r):
                out[key] = f"field error {r.error:.3g} above the tolerance {self.tolerance:g}"
            elif chosen is not None and chosen.faster_than(r):
                out[key] = (f"{chosen.label} is measurably faster ({chosen.wall_min:.3g}-"
                            f"{chosen.wall_max:.3g} s against {r.wall_min:.3g}-{r.wall_max:.3g} s) within the tolerance")
            elif chosen is not None and min(len(r.times), len(chosen.times)) < MIN_TIMED:
                out[key] = (f"not compared for speed with {chosen.label}: fewer than {MIN_TIMED} timings "
                            f"(--repeats {MIN_TIMED} or more), so the more accurate run is kept")
            elif chosen is not None and not r.faster_than(chosen):
                more = "more accurate, but " if _error(r) < _error(chosen) else ""
                out[key] = (f"{more}not measurably faster than {chosen.label} ({r.wall_min:.3g}-"
                            f"{r.wall_max:.3g} s against {chosen.wall_min:.3g}-{chosen.wall_max:.3g} s; "
                            f"at least {MIN_GAIN:.0%} beyond the spread is needed)")
            else:
                out[key] = "acceptable, but less accurate than the recommendation and not faster beyond the spread"
        return out

    # -- presentation -------------------------------------------------------------------------
    def rows(self) -> list[dict]:
        rows = []
        for r in self.runs:
            thr = r.throughput
            if "mlups" in thr:
                throughput = f"{thr['mlups']:.1f} MLUPS"
            elif "time_per_iteration_s" in thr:
                throughput = f"{thr['time_per_iteration_s'] * 1e3:.3g} ms/it"
            else:
                throughput = ""
            ref_err = ", ".join(f"{k}={v:.3g}" for k, v in list(r.reference_errors.items())[:3])
            res = ""
            if "true_residual" in r.residuals:
                res = f"{r.residuals['true_residual']:.2e}"
                if "residual_gap" in r.residuals:
                    res += f" (gap {r.residuals['residual_gap']:.1e})"
            pc = r.preconditioner or r.preconditioner_used or ""
            if r.preconditioner and r.preconditioner_used and r.preconditioner_used != r.preconditioner:
                pc += f" ({r.preconditioner_used})"          # auto -> what it resolved to
            its = r.residuals.get("iterations")
            pc_setup = r.preconditioner_info.get("setup_time_s")
            rows.append({
                "backend": r.backend, "precision": r.precision + (" (ref)" if r.is_reference else ""),
                "preconditioner": pc,
                "status": r.status, "time_s": (f"{r.wall_s:.3g} ({r.wall_min:.3g}-{r.wall_max:.3g}, n={len(r.times)})"
                                               if r.times else f"{r.wall_s:.3g}" if math.isfinite(r.wall_s) else ""),
                "throughput": throughput,
                "speedup": f"{r.speedup:.2f}x" if math.isfinite(r.speedup) else "",
                "iterations": str(int(its)) if isinstance(its, (int, float)) and math.isfinite(its) else "",
                "pc_setup_s": f"{pc_setup:.3g}" if isinstance(pc_setup, (int, float)) else "",
                "memory_MiB": f"{r.memory_bytes / 2**20:.1f}" if r.memory_bytes else "",
                "err_vs_fp64_L2": f"{r.error:.2e}" if math.isfinite(r.error) else "",
                "err_vs_fp64_max": (f"{max(e['rel_max'] for e in r.field_errors.values()):.2e}"
                                    if r.field_errors else ""),
                "true_residual": res, "vs_published/analytic": ref_err,
            })
        return rows

    def table(self) -> str:
        rows = self.rows()
        cols = [c for c in rows[0] if any(row[c] for row in rows)] if rows else []
        lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        lines += ["| " + " | ".join(str(row[c]) for c in cols) + " |" for row in rows]
        rec = self.recommendation()
        lines.append("")
        lines.append("time_s: median solver time of the timed runs (min-max, number of runs), after one untimed warm-up.")
        if any(row["pc_setup_s"] for row in rows):
            lines.append("pc_setup_s: building the preconditioner (multigrid hierarchy), before the solve and not in time_s.")
        lines.append("")
        if rec["backend"]:
            pc = f" / {rec['preconditioner']}" if rec.get("preconditioner") else ""
            lines.append(f"Recommendation: **{rec['backend']} / {rec['precision']}{pc}** ({rec['why']}).")
        else:
            lines.append(f"Recommendation: none ({rec['why']}).")
        lines.append("")
        for k, why in self.verdicts().items():
            lines.append(f"- {k}: {why}")
        for k, why in self.skipped.items():
            lines.append(f"- skipped {k}: {why}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> dict:
        ref = next((r for r in self.runs if r.is_reference), None)
        return _jsonable({"case": self.case_name, "solver": self.solver, "tolerance": self.tolerance,
                          "reference": ref.label if ref is not None else "/".join(REFERENCE),
                          "preconditioners": self.preconditioners, "recommendation": self.recommendation(),
                          "verdicts": self.verdicts(),
                          "runs": [r.to_dict() for r in self.runs], "skipped": self.skipped,
                          "error_definition": "largest relative L2 error over the fields vs the CPU FP64 run"})

    def plot_pareto(self, path: str | Path) -> Path:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4.5))
        marked = False
        for r in self.runs:
            err = r.error if not r.is_reference else np.nan
            if math.isfinite(err) and err > 0 and math.isfinite(r.wall_s):
                ok = r.status in OK_STATUS
                xerr = [[r.wall_s - r.wall_min], [r.wall_max - r.wall_s]]
                ax.errorbar(r.wall_s, err, xerr=xerr, fmt="o" if ok else "x", ms=6 if ok else 9, capsize=3,
                            color=None if ok else "red",
                            label=None if ok or marked else "not converged / failed")
                marked = marked or not ok
                ax.annotate(r.label + ("" if ok else f" ({r.status})"), (r.wall_s, err),
                            textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.axhline(self.tolerance, color="gray", ls="--", lw=1, label=f"tolerance {self.tolerance:g}")
        ref = self.reference
        ax.axvspan(ref.wall_min, ref.wall_max, color="k", alpha=0.08)
        ax.axvline(ref.wall_s, color="k", ls=":", lw=1, label="CPU fp64 reference time (median, min-max)")
        ax.set_xlabel("solver time [s] (median, bars: min-max of the timed runs)")
        ax.set_ylabel("relative L2 error vs CPU fp64")
        ax.set_title(f"{self.case_name}: accuracy vs speed")
        ax.legend(fontsize=8)
        fig.tight_layout()
        return _save(fig, path)

    def plot_drift(self, path: str | Path) -> Path | None:
        runs = [r for r in self.runs if r.drift.get("time") and not r.is_reference]
        if not runs:
            return None
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4.5))
        for r in runs:
            err = np.asarray(r.drift["rel_l2"], dtype=float)
            t = np.asarray(r.drift["time"], dtype=float)
            keep = err > 0
            ax.semilogy(t[keep], err[keep], "o-", label=r.label)
        ax.set_xlabel("time [s]")
        ax.set_ylabel("velocity relative L2 error vs CPU fp64")
        ax.set_title(f"{self.case_name}: error drift over time")
        ax.legend(fontsize=8)
        fig.tight_layout()
        return _save(fig, path)

    def plot_residuals(self, path: str | Path) -> Path | None:
        runs = [r for r in self.runs if r.result is not None and any("residual" in k for k in r.result.series)]
        if not runs:
            return None
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4.5))
        for r in runs:
            s = r.result.series
            for key in sorted(k for k in s if "residual" in k and not k.endswith("_iterations")):
                y = np.asarray(s[key], dtype=float)
                xkey = key + "_iterations"
                x = np.asarray(s[xkey]) if xkey in s else np.arange(y.size)
                sparse = key == "residual_true"     # sampled at checks, not every iteration: markers, no line
                ax.semilogy(x, y, "o" if sparse else "-", lw=1, ms=3, label=f"{r.label} {key}")
        ax.set_xlabel("iteration")
        ax.set_ylabel("relative residual")
        ax.set_title(f"{self.case_name}: residual histories")
        ax.legend(fontsize=6)
        fig.tight_layout()
        return _save(fig, path)

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        files = {"json": write_json(self.to_dict(), out / "comparison.json")}
        with atomic_path(out / "comparison.md") as tmp:
            tmp.write_text(f"# {self.case_name}: accuracy vs speed\n\n{self.table()}\n", encoding="utf-8")
        files["md"] = out / "comparison.md"
        plots = out / "plots"
        plots.mkdir(exist_ok=True)
        files["pareto"] = self.plot_pareto(plots / "pareto.png")
        for name, fn in (("drift", self.plot_drift), ("residuals", self.plot_residuals)):
            p = fn(plots / f"{name}.png")
            if p is not None:
                files[name] = p
        return files


def _save(fig, path) -> Path:
    import matplotlib.pyplot as plt

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return Path(path)


def _drift(res: Result, ref: Result) -> dict:
    times, errs = [], []
    for s, r in zip(res.snapshots, ref.snapshots):
        key = "velocity" if "velocity" in r.fields else next(iter(r.fields), None)
        if key is None or key not in s.fields or s.step != r.step:
            continue
        times.append(r.time)
        errs.append(field_error(s.fields[key], r.fields[key])["rel_l2"])
    return {"time": times, "rel_l2": errs} if times else {}


COMPARISON_FILES = ("comparison.json", "comparison.md")
COMPARISON_PLOTS = ("pareto", "drift", "residuals")       # plots/<name>.png of Comparison.write


def check_out(out: str | Path, overwrite: bool = False) -> None:
    """Refuse, naming ``--out``, a comparison folder that is not a usable folder, or that already holds a
    comparison (its files, or a run folder with a result or checkpoints) unless ``overwrite``: a second comparison into the
    same folder used to replace the first one's files without being asked."""
    from hpcsolve.core import outdir

    outdir.check(out, overwrite=True)       # a file, a dangling link, no permission: one error naming --out
    out = Path(out)
    if overwrite or not out.is_dir():
        return
    try:
        held = [n for n in COMPARISON_FILES if (out / n).exists()]
        held += sorted(p.name + "/" for p in out.iterdir()
                       if p.is_dir() and _run_folder_name(p.name)
                       and (outdir.has_result(p) or outdir.has_checkpoints(p)))
    except OSError as exc:
        raise OutputError.invalid("--out", str(out), "a folder this user can read",
                                  why=f"cannot look at it ({exc.strerror})") from None
    if held:
        names = ", ".join(held[:4]) + (f" and {len(held) - 4} more" if len(held) > 4 else "")
        raise OutputError.invalid("--out", str(out), "a new folder, or --overwrite (overwrite=True) to replace the "
                                  "comparison there", why=f"already holds a comparison's files ({names})")


def _retire_comparison(out: Path) -> None:
    """An earlier comparison's own files go before the first run replaces one of its run folders: a comparison
    stopped part way must not leave comparison.json / .md (and its plots) describing runs that are no longer there
    (the new files are written when every run is done). A comparison refused before its first run keeps them."""
    for name in COMPARISON_FILES + tuple(f"plots/{p}.png" for p in COMPARISON_PLOTS):
        try:
            (out / name).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise OutputError.invalid("--out", str(out), "a folder whose comparison files can be replaced",
                                      why=f"cannot remove {name} ({exc.strerror})") from None


def _run_folder_name(name: str) -> bool:
    """``name`` is one compare gives a run's folder: <backend>-<precision>[-<preconditioner>]."""
    for b in backends_mod.BACKENDS:
        for p in precision_mod.POLICIES:
            if name == f"{b}-{p}" or (name.startswith(f"{b}-{p}-") and name[len(b) + len(p) + 2:].isalpha()):
                return True
    return False


PRECONDITIONERS_FIELD = "--preconditioners"


def preconditioner_names() -> tuple[str, ...]:
    """The names ``solve.preconditioner`` of a FEM case accepts (from the case model, so they stay in step)."""
    import typing

    try:
        from hpcsolve.fem.case import SolverSection

        names = typing.get_args(SolverSection.model_fields["preconditioner"].annotation)
    except (ImportError, KeyError, AttributeError):   # pragma: no cover - the model always has the field
        names = ()
    if not names:   # pragma: no cover - a model that validates the name another way
        from hpcsolve.fem.linalg.precond import NAMES

        names = ("auto",) + tuple(NAMES)
    return tuple(str(n) for n in names)


def _check_preconditioners(case: CaseBase, preconditioners) -> list[str] | None:
    """The preconditioner dimension, checked before anything runs: names known (lower case, duplicates
    dropped), a FEM case only."""
    if preconditioners is None:
        return None
    if isinstance(preconditioners, str):
        preconditioners = [preconditioners]
    if case.solver != "fem":
        raise CaseError(f"{PRECONDITIONERS_FIELD} applies to FEM cases only: the preconditioner is a setting of "
                        f"the FEM linear solve (solve.preconditioner), and {case.name} is an {case.solver.upper()} "
                        f"case (solver = {case.solver!r}); leave {PRECONDITIONERS_FIELD} out",
                        field=PRECONDITIONERS_FIELD, value=list(preconditioners), allowed="FEM cases only")
    allowed = preconditioner_names()
    names: list[str] = []
    for p in preconditioners:
        if not isinstance(p, str) or p.strip().lower() not in allowed:
            raise CaseError.invalid(PRECONDITIONERS_FIELD, p, ", ".join(allowed))
        if p.strip().lower() not in names:
            names.append(p.strip().lower())
    if not names:
        raise CaseError.invalid(PRECONDITIONERS_FIELD, [], ", ".join(allowed), why="no preconditioner given")
    return names


def _with_preconditioner(case: CaseBase, name: str) -> CaseBase:
    """``case`` with solve.preconditioner = ``name``, through the path ``--set`` takes."""
    try:
        return case.with_overrides(f"solve.preconditioner={name}")
    except CaseError as exc:
        raise CaseError(f"{name!r}: {exc}", field=PRECONDITIONERS_FIELD, value=name) from None


def compare(case: CaseBase | str | Path, backends: list[str] | None = None, precisions: list[str] | None = None,
            tolerance: float = DEFAULT_TOLERANCE, *, out: str | Path | None = None, overrides=(),
            progress: bool = False, warmup: bool = True, repeats: int | None = None,
            time_budget_s: float = DEFAULT_BUDGET_S, preconditioners: list[str] | None = None,
            overwrite: bool = False) -> Comparison:
    """Run ``case`` for each available backend x precision plus the CPU FP64 reference and compare.

    With ``warmup`` (default) each configuration runs once untimed first, so kernel compilation,
    memory-pool growth and first-call imports are not counted in its time. ``repeats``: exactly this
    many timed runs per configuration; by default at least 3, more (up to 10) while the spread is
    above 5% and ``time_budget_s`` of timed runs per configuration allows. The first timed run's
    result is the one written and compared.

    ``preconditioners`` (FEM cases only): names of ``solve.preconditioner`` ("none", "jacobi", "mg",
    "amg", "auto"); every backend x precision runs once per name. A name the case model does not
    accept, or the option on an LBM case, is refused (CaseError) before anything runs; a configuration
    whose run refuses its preconditioner (e.g. "mg" on a mesh that is not a structured generator mesh)
    is recorded as failed with the reason, and the others still run.

    ``out``: the folder of the comparison (comparison.json / .md, plots/, one folder per run); one that already
    holds a comparison is refused before anything runs unless ``overwrite`` (:func:`check_out`)."""
    from hpcsolve.run import as_names, check_memory, out_folder_arg, plan, run_case

    overrides = as_names(overrides, "overrides")
    backends = None if backends is None else as_names(backends, "backends")
    precisions = None if precisions is None else as_names(precisions, "precisions")
    for name, value in (("backends", backends), ("precisions", precisions)):
        if value == []:           # used to run the reference alone, as if nothing had been asked
            raise CaseError.invalid(name, value, f"at least one name (None: every {name[:-1]} usable here)")
    if not isinstance(case, CaseBase):
        case = load_case(case, overrides)
    else:       # validated again as a whole (edits in Python skip the rules across fields)
        case = case.with_overrides(*overrides)
    if isinstance(tolerance, bool) or not (isinstance(tolerance, (int, float)) and tolerance >= 0
                                           and math.isfinite(tolerance)):
        raise CaseError.invalid("--tolerance", tolerance, "a finite number >= 0 (relative error)")
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int)
                                or not 1 <= repeats <= REPEATS_LIMIT):
        raise CaseError.invalid("--repeats", repeats, f"an integer in [1, {REPEATS_LIMIT}]",
                                why="each repeat is a whole timed run of the case, for every configuration"
                                if isinstance(repeats, int) and repeats > REPEATS_LIMIT else None)
    family = case.solver
    pc_names = _check_preconditioners(case, preconditioners)
    skipped: dict = {}
    explicit = backends is not None
    if backends is None:
        backends = [b for b in backends_mod.BACKENDS if backends_mod.probe(b).available
                    and not backends_mod.probe(b).simulator]
    for b in backends:
        if str(b) not in backends_mod.BACKENDS:
            raise CaseError.invalid("--backends", b, ", ".join(backends_mod.BACKENDS))
    backends = [str(b) for b in backends]   # Backend objects or names: compared and labelled by name
    if explicit:
        # asked for by name: when none of them can run here, the comparison would hold the reference alone
        why = {b: backends_mod.probe(b).reason for b in backends if not backends_mod.probe(b).available}
        if backends and len(why) == len(backends):
            usable = [b for b in backends_mod.BACKENDS if backends_mod.probe(b).available]
            raise CaseError.invalid("--backends", " ".join(backends), "backends usable here: " + ", ".join(usable),
                                    why="none of them can run here (" + "; ".join(f"{b}: {r}" for b, r in why.items())
                                        + ")")
    if precisions is None:
        precisions = precision_mod.names(family)
    for p in precisions:
        precision_mod.get_precision(p, family=family, field="--precisions")
    # one case per preconditioner, validated now: a name the case model refuses stops before any run
    if pc_names is None:
        pc_cases: dict = {None: case}
        ref_pcs: list = [None]
    else:
        pc_cases = {name: _with_preconditioner(case, name) for name in pc_names}
        own = getattr(getattr(case, "solve", None), "preconditioner", None)
        ref_pcs = ([own] if own in pc_names else []) + [n for n in pc_names if n != own]
    # the CPU FP64 configurations first (the reference: the first of them that runs), then the rest
    configs = [(*REFERENCE, pc) for pc in ref_pcs]
    configs += [(b, p, pc) for b in backends for p in precisions for pc in pc_cases if (b, p) != REFERENCE]
    out_path = out_folder_arg(out)
    if out_path is not None:
        check_out(out_path, overwrite)
    retire = out_path is not None and overwrite      # the earlier comparison's files: before the first run writes
    runs: list[Run] = []
    ref_result = None
    ref_run: Run | None = None
    for i, (backend, prec, pc) in enumerate(configs):
        key = f"{backend}/{prec}" + (f"/{pc}" if pc is not None else "")
        status = backends_mod.probe(backend)
        if not status.available:
            skipped[key] = status.reason
            continue
        name = f"{backend}-{prec}" + (f"-{pc}" if pc is not None else "")
        run_dir = out_path / name if out_path is not None else None
        try:
            # the setup is built once per configuration
            cfg_case, backend_obj, policy, desc = plan(pc_cases[pc], backend, prec)
            if warmup:
                run_case(cfg_case, backend_obj, policy, progress=False, description=desc)
            if retire:                 # the first run that will write: unless it is refused before it starts
                check_memory(desc, backend_obj)
                _retire_comparison(out_path)
                retire = False
            res = run_case(cfg_case, backend_obj, policy, out=run_dir, progress=progress, overwrite=True,
                           description=desc)
            times, extra = [_solver_seconds(res)], 0.0
            while _more_repeats(times, repeats, time_budget_s, extra):
                t0 = time.perf_counter()
                times.append(_solver_seconds(run_case(cfg_case, backend_obj, policy, progress=False, description=desc)))
                if len(times) > DEFAULT_REPEATS:
                    extra += time.perf_counter() - t0
        except HpcsolveError as exc:
            partial = getattr(exc, "result", None)
            # no reference yet: only another CPU FP64 configuration still to come may take its place
            if ref_result is None and not any((b, p) == REFERENCE for b, p, _ in configs[i + 1:]):
                raise
            runs.append(Run(backend, prec, status=getattr(partial, "status", "failed") if partial else "failed",
                            preconditioner=pc, message=str(exc), reference_run=False))
            continue
        used = res.metrics.get("preconditioner")
        run = Run(backend, prec, status=res.status, preconditioner=pc, wall_s=float(np.median(times)), times=times,
                  total_s=float(res.timings.get("total_s", math.nan)), throughput=_throughput(res),
                  memory_bytes=desc.memory_bytes, reference_errors=_reference_errors(res),
                  residuals=_residuals(res), message=res.message,
                  preconditioner_used=used if isinstance(used, str) else None,
                  preconditioner_info=dict(res.metrics.get("preconditioner_info") or {}),
                  reference_run=ref_result is None, result=res)
        if ref_result is None:
            ref_result, ref_run = res, run
        for fname, ref in ref_result.fields.items():
            if fname in SKIP_FIELDS or fname not in res.fields or not np.issubdtype(np.asarray(ref).dtype, np.floating):
                continue
            run.field_errors[fname] = field_error(res.fields[fname], ref)
        run.drift = _drift(res, ref_result)
        run.speedup = ref_run.wall_s / run.wall_s if run.wall_s > 0 else math.nan
        runs.append(run)
    comp = Comparison(case.name, family, float(tolerance), runs, skipped, preconditioners=pc_names)
    if out_path is not None:
        comp.write(out_path)
    return comp
