"""case -> solver -> Result: the one entry point the CLI and notebooks use."""

from __future__ import annotations

import datetime as _dt
import importlib
import platform
import socket
from pathlib import Path

from hpcsolve import __version__, backends
from hpcsolve.cases import CaseBase, load_case
from hpcsolve.errors import CaseError, HpcsolveError
from hpcsolve.precision import Precision, get_precision
from hpcsolve.results import Result

RESULT_FILES = ("result.h5", "summary.json")


def family_runner(family: str):
    """The module that runs cases of a solver family: ``hpcsolve.<family>.runner``.

    It provides ``run(case, backend, policy, progress) -> Result`` and
    ``describe(case, backend, policy) -> dict`` (derived parameters, memory estimate).
    """
    return importlib.import_module(f"hpcsolve.{family}.runner")


def prepare(case: CaseBase | str | Path, backend: str | None = None, precision: str | Precision | None = None,
            overrides=()) -> tuple[CaseBase, str, Precision]:
    if not isinstance(case, CaseBase):
        case = load_case(case, overrides)
    elif overrides:
        case = case.with_overrides(*overrides)
    backend = backends.resolve(backend or case.run.backend, field="backend" if backend else "run.backend")
    policy = get_precision(precision or case.run.precision, family=case.solver,
                           field="precision" if precision else "run.precision")
    return case, backend, policy


def describe(case, backend=None, precision=None, overrides=()) -> dict:
    """Derived parameters and memory estimate of a case, without running it."""
    case, backend, policy = prepare(case, backend, precision, overrides)
    info = {"case": case.name, "solver": case.solver, "backend": backend, "precision": policy.name}
    info.update(family_runner(case.solver).describe(case, backend, policy))
    return info


def default_out_dir(case: CaseBase, backend: str, policy: Precision) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{case.name}-{backend}-{policy.name}-{stamp}"


def check_out_dir(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise CaseError.invalid("--out", str(out), "a folder (new, or holding a result with --overwrite)",
                                why="exists and is not a folder")
    if out.is_dir() and not overwrite and any((out / n).exists() for n in RESULT_FILES):
        raise CaseError.invalid("--out", str(out), "a new folder, or --overwrite to replace the result there",
                                why="already holds a result")


def provenance(case: CaseBase, backend: str, policy: Precision) -> dict:
    return {
        "hpcsolve_version": __version__,
        "backend": backend,
        "precision": policy.name,
        "device": backends.device_name(backend),
        "packages": backends.package_versions(),
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "case_file": str(case.path) if case.path else "",
        "overrides": list(case.overrides),
    }


def run_case(case: CaseBase | str | Path, backend: str | None = None, precision: str | Precision | None = None,
             *, out: str | Path | None = None, overrides=(), progress: bool = True, overwrite: bool = False,
             plots: bool = True) -> Result:
    """Run a case and return its Result; with ``out``, also write the result files there."""
    case, backend, policy = prepare(case, backend, precision, overrides)
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        check_out_dir(out_path, overwrite)
    runner = family_runner(case.solver)
    try:
        result = runner.run(case, backend, policy, progress=progress)
    except HpcsolveError as exc:
        partial = getattr(exc, "result", None)
        if partial is not None and out_path is not None:
            _finish(partial, case, backend, policy)
            partial.write(out_path, plots=plots)
        raise
    _finish(result, case, backend, policy)
    if out_path is not None:
        result.write(out_path, plots=plots)
    return result


def _finish(result: Result, case: CaseBase, backend: str, policy: Precision) -> None:
    result.provenance = {**provenance(case, backend, policy), **result.provenance}
    result.case_text = case.text
    result.case_json = case.effective_json()
