"""``hpcsolve bench fem``, whole-run part (issue 33): where the time of one whole FEM run goes.

For each shipped FEM case (the ``cases/*.toml`` whose solver is ``fem``, or the cases of ``--whole-run-cases``) at
a ladder of mesh sizes (``--whole-run-levels``: level 0 is the case's own mesh, level k halves its cells k times:
``mesh.nx`` (and ``mesh.ny``) times 2^k for a generator mesh, ``mesh.refine`` + k for a mesh file) and each backend
usable here, one run is what ``hpcsolve run`` does: ``hpcsolve.fem.runner.run`` and ``Result.write`` (result.h5,
XDMF, summary.json and, as the case says, the plots) into a scratch folder. One warm-up run, then the median of
``--whole-run-repeats`` runs of each phase:

mesh, assembly, boundary conditions (``result.timings``: mesh_s, assembly_s, boundary_conditions_s), the solver's
set-up (solver_setup_s: matrix upload and preconditioner set-up, which preconditioner_setup_s is part of), the
solve (solve_s), post (norms_s: error norms against the exact solution, the probe), the float64 reference
(reference_wait_s: what the run spent on it on its own thread, when it makes one; all of its time reference_s on a
CPU backend, on a GPU one the part not hidden behind the run's work after the solve, ``hpcsolve.fem.reference``),
output (the write, timed here) and the total (the runner's wall plus the write). A phase a run lacks (no reference
made) is None ("-" in the table). Host BLAS/OpenMP threads are pinned as in every run (``Backend.run_context``). A
backend that cannot run here is skipped with a one-line note.

``scripts/fem_run_phases.py`` times one case the same way (:func:`one_run`).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from hpcsolve.core import backends
from hpcsolve.core.cases import CaseBase, load_case
from hpcsolve.core.errors import CaseError
from hpcsolve.core.precision import get_precision
from hpcsolve.fem import runner
from hpcsolve.report.bench_inputs import check_sizes

#: what scripts/fem_run_phases.py prints (run_s: the runner's own wall; total_s: run_s + output_s)
PHASES = ("mesh_s", "assembly_s", "boundary_conditions_s", "solver_setup_s", "preconditioner_setup_s", "solve_s",
          "norms_s", "reference_s", "reference_wait_s", "run_s", "output_s", "total_s")
#: the table's phase columns (heading, key); they do not overlap, so they add up to at most the total
COLUMNS = (("mesh", "mesh_s"), ("assembly", "assembly_s"), ("BCs", "boundary_conditions_s"),
           ("set-up", "solver_setup_s"), ("solve", "solve_s"), ("post", "norms_s"), ("reference", "reference_wait_s"),
           ("output", "output_s"))
#: the medians a row holds: the columns, the preconditioner's part of the set-up, the reference's own time, the
#: runner's wall, the total
ROW_KEYS = tuple(k for _, k in COLUMNS) + ("preconditioner_setup_s", "reference_s", "run_s", "total_s")
#: refinement levels: the case's mesh and two halvings of its cells (NumPy, 2-core machine, 2026-12-04: 51 s for the
#: three shipped cases with a warm-up and 3 repeats; 19 s of it heat_plate_with_hole at mesh.refine = 3, mostly its
#: float64 reference)
LEVELS = (0, 1, 2)
QUICK_LEVELS = (0,)
MAX_LEVEL = 6
REPEATS = 3
QUICK_REPEATS = 1
MAX_REPEATS = 50
#: the backends timed by default: the GPU ones, then the CPU reference (CuPy / Numba-CUDA / NumPy)
DEFAULT_BACKENDS = tuple(sorted(backends.BACKENDS, key=lambda name: not backends.get(name).gpu))


def cases_folder() -> Path | None:
    """The shipped cases: ``cases/`` of the source checkout this package runs from, else ``./cases``."""
    for folder in (Path(__file__).resolve().parents[2] / "cases", Path.cwd() / "cases"):
        if folder.is_dir() and any(folder.glob("*.toml")):
            return folder
    return None


def shipped_cases() -> dict[str, CaseBase]:
    """The cases of :func:`cases_folder`, loaded, by file name (without .toml); {} without the folder. A case
    file that does not load is left out (``hpcsolve validate`` says why)."""
    folder = cases_folder()
    found: dict[str, CaseBase] = {}
    for path in sorted(folder.glob("*.toml")) if folder is not None else ():
        try:
            found[path.stem] = load_case(path)
        except CaseError:
            continue
    return found


def check_cases(values) -> tuple[CaseBase, ...]:
    """--whole-run-cases: names of shipped FEM cases or paths of FEM case files (a CaseError naming the first
    other one); none given: every shipped FEM case (in the order of their file names)."""
    shipped = shipped_cases()
    fem = [name for name, case in shipped.items() if case.solver == "fem"]
    if not values:
        return tuple(shipped[name] for name in fem)
    allowed = f"a shipped FEM case ({', '.join(fem) or 'none found: no cases/ folder'}) or a FEM case file (.toml)"
    cases = []
    for value in values:
        path = Path(value)
        if value in shipped:
            case = shipped[value]
        elif path.suffix == ".toml" and path.is_file():
            case = load_case(path)
        else:
            raise CaseError.invalid("--whole-run-cases", value, allowed)
        if case.solver != "fem":
            raise CaseError.invalid("--whole-run-cases", value, allowed, why=f"a {case.solver} case, not a FEM one")
        cases.append(case)
    return tuple(cases)


def size_override(case: CaseBase, level: int) -> tuple[str, ...]:
    """The ``--set`` assignments of refinement ``level`` (0: the case's own mesh, as an explicit value)."""
    mesh = case.mesh
    if mesh.kind == "file":
        return (f"mesh.refine={mesh.refine + level}",)
    out = (f"mesh.nx={mesh.nx * 2 ** level}",)
    out += (f"mesh.ny={mesh.ny * 2 ** level}",) if mesh.ny is not None else ()
    return out + ((f"mesh.nz={mesh.nz * 2 ** level}",) if getattr(mesh, "nz", None) is not None else ())


def plan(cases, levels) -> list[dict]:
    """One entry per case x level: its name, level, size label and the case with the size set; a size the case
    schema refuses (mesh.refine above 8, mesh.nx above 20000) is a CaseError naming --whole-run-levels."""
    entries = []
    for case in cases:
        for level in levels:
            sets = size_override(case, level)
            try:
                sized = case.with_overrides(*sets)
            except CaseError as exc:
                raise CaseError.invalid("--whole-run-levels", level, f"levels up to where {case.name}'s mesh is "
                                        "still a valid case", why=f"{case.name}: {exc}") from None
            entries.append({"case": case.name, "level": level, "size": " ".join(sets), "run_case": sized})
    return entries


def check_options(args, quick: bool):
    """The whole-run plan of ``bench fem``'s options, checked before anything is timed (a CaseError naming the
    option): (entries of :func:`plan`, backend names, repeats); None with --no-whole-run."""
    given = [f for f in ("whole_run_cases", "whole_run_levels", "whole_run_repeats")
             if getattr(args, f, None) is not None]
    if getattr(args, "no_whole_run", False):
        if given:
            option = "--" + given[0].replace("_", "-")
            raise CaseError.invalid(option, getattr(args, given[0]), "only without --no-whole-run",
                                    why="--no-whole-run skips the whole-run table this option sets up")
        return None
    levels = getattr(args, "whole_run_levels", None) or (QUICK_LEVELS if quick else LEVELS)
    check_sizes(levels, "--whole-run-levels", 0, MAX_LEVEL,
                f"refinement levels in [0, {MAX_LEVEL}] (0: the case's mesh, k: its cells halved k times)")
    repeats = getattr(args, "whole_run_repeats", None)
    repeats = (QUICK_REPEATS if quick else REPEATS) if repeats is None else repeats
    check_sizes([repeats], "--whole-run-repeats", 1, MAX_REPEATS, f"timed runs per row in [1, {MAX_REPEATS}]")
    entries = plan(check_cases(getattr(args, "whole_run_cases", None)), tuple(dict.fromkeys(levels)))
    return entries, tuple(getattr(args, "backends", None) or DEFAULT_BACKENDS), repeats


def one_run(case, backend, policy, plots: bool):
    """(phases, Result) of one run: ``runner.run`` then ``Result.write`` into a scratch folder. ``phases``: the
    run's ``result.timings`` as they are, with run_s (the runner's wall), output_s (the write), total_s (their sum),
    and the run's iterations, status, error_l2 and reference (metrics)."""
    t0 = time.perf_counter()
    res = runner.run(case, backend, policy)
    run_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t1 = time.perf_counter()
        res.write(tmp, plots=plots)
        out_s = time.perf_counter() - t1
    phases = dict(res.timings)
    phases.update(run_s=run_s, output_s=out_s, total_s=run_s + out_s, iterations=res.metrics.get("iterations"),
                  status=res.status, error_l2=res.metrics.get("error_l2"), reference=res.metrics.get("reference"))
    return phases, res


def _row_phases(phases: dict, res) -> dict:
    """One run's ROW_KEYS (None for a phase the run lacks: no reference made, no preconditioner to set up)."""
    out = {k: (float(phases[k]) if phases.get(k) is not None else None) for k in ROW_KEYS}
    if "reference_true_residual" not in res.metrics:          # the run made no float64 reference
        out["reference_s"] = out["reference_wait_s"] = None
    return out


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def time_entry(entry: dict, backend, repeats: int) -> dict:
    """The row of one case x size on ``backend``: a warm-up run, then the median of ``repeats`` runs per phase
    (``runs``: every timed run's phases, ``solve_s`` of each the value of its ``result.timings``)."""
    case = entry["run_case"]
    policy = get_precision(case.run.precision, family="fem")
    plots = bool(case.output.plots)
    cold, res = one_run(case, backend, policy, plots)
    runs = []
    for _ in range(repeats):
        phases, res = one_run(case, backend, policy, plots)
        runs.append(_row_phases(phases, res))
    row = {"case": entry["case"], "level": entry["level"], "size": entry["size"],
           "unknowns": int(res.derived["unknowns"]), "backend": backend.name, "precision": policy.name,
           "status": res.status, "iterations": res.metrics.get("iterations"), "repeats": repeats}
    row.update({k: _median(r[k] for r in runs) for k in ROW_KEYS})
    row["solve_share"] = row["solve_s"] / row["total_s"] if row["total_s"] else None
    row["cold_total_s"] = float(cold["total_s"])
    row["runs"] = runs
    return row


def _usable(names, notes: list) -> list:
    """The Backends of ``names`` that can be timed here; a note for each other one."""
    usable = []
    for name in dict.fromkeys(names):
        be = backends.get(name)
        if not be.available:
            notes.append(f"{name}: skipped, not available here ({be.status.reason})")
        elif be.simulator:
            notes.append(f"{name}: skipped, the CUDA simulator runs here (its times are no measurement)")
        else:
            usable.append(be)
    return usable


def whole_run_table(result: dict, entries, backend_names, repeats: int) -> None:
    """Time every entry of :func:`plan` on every usable backend of ``backend_names``; the rows go to
    ``result["whole_run"]``, the settings and notes (skipped backends, failed runs) to
    ``result["whole_run_settings"]``."""
    notes: list[str] = []
    rows = result.setdefault("whole_run", [])
    usable = _usable(backend_names, notes)
    result["whole_run_settings"] = {"repeats": repeats, "backends": [be.name for be in usable],
                                    "cases": list(dict.fromkeys(e["case"] for e in entries)),
                                    "levels": list(dict.fromkeys(e["level"] for e in entries)),
                                    "cpu_threads": backends.cpu_threads(), "notes": notes}
    for note in notes:
        print(f"whole run: {note}", flush=True)
    if not entries:
        notes.append("no FEM case to run: no cases/ folder here (--whole-run-cases takes case files)")
        print(f"whole run: {notes[-1]}", flush=True)
    for be in usable:
        with be.run_context():
            for entry in entries:
                _time_and_add(rows, notes, entry, be, repeats)


def _time_and_add(rows: list, notes: list, entry: dict, be, repeats: int) -> None:
    """One row (or, where the run fails, a note; the table goes on with the others)."""
    try:
        row = time_entry(entry, be, repeats)
    except Exception as exc:  # report, keep benchmarking the rest
        notes.append(f"{entry['case']} {entry['size']} on {be.name} failed: {type(exc).__name__}: {exc}")
        print(f"whole run: {notes[-1]}", flush=True)
        return
    finally:
        be.free_pool()
    rows.append(row)
    if row["status"] != "converged":
        notes.append(f"{row['case']} {row['size']} on {row['backend']}: {row['status']} after {row['iterations']} "
                     "iterations (its solve phase is the time to the solver's stop)")
    print(f"  whole run {row['case']:<22} {row['size']:<14} {row['backend']:<10} total {row['total_s']:8.3f} s, "
          f"solve {row['solve_s']:8.3f} s ({100 * (row['solve_share'] or 0):.0f}%)", flush=True)


def _runs(n: int) -> str:
    return "1 timed run" if n == 1 else f"{n} timed runs"


def _cell(seconds) -> str:
    return "-" if seconds is None else f"{seconds:.4f}"


def markdown(res: dict) -> list[str]:
    """The whole-run table and its notes (lines to append to bench_fem.md); [] when it did not run."""
    settings = res.get("whole_run_settings")
    if settings is None:
        return []
    heads = " | ".join(h for h, _ in COLUMNS)
    lines = ["", f"Whole run: one `hpcsolve run` of each FEM case (runner and result files into a scratch folder), "
             f"seconds per phase, median of {_runs(settings['repeats'])} after a warm-up; host BLAS threads "
             f"{settings['cpu_threads']}:", "",
             f"| case | size (unknowns) | backend | {heads} | total | solve share |",
             "| --- | --- | --- | " + " | ".join("---" for _ in COLUMNS) + " | --- | --- |"]
    for r in res.get("whole_run", []):
        cells = " | ".join(_cell(r[k]) for _, k in COLUMNS)
        share = "-" if r["solve_share"] is None else f"{100 * r['solve_share']:.0f}%"
        lines.append(f"| {r['case']} | {r['size']} ({r['unknowns']:,}) | {r['backend']} | {cells} | "
                     f"{_cell(r['total_s'])} | {share} |")
    lines += ["", "set-up: the solver's set-up (preconditioner set-up included); post: error norms and the probe; "
              "reference: what the run spent on the float64 direct solve on its own thread (all of it on the CPU; "
              "on a GPU it factorizes beside the run's work after the solve; - where the run makes none); "
              "output: result.h5, XDMF, "
              "summary.json and plots; total: the whole run (also the checks between phases)."]
    lines += [f"Note: {n}" for n in settings["notes"]]
    return lines
