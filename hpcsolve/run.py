"""case -> solver -> Result: the one entry point the CLI and notebooks use."""

from __future__ import annotations

import datetime as _dt
import platform
import signal
import socket
from contextlib import contextmanager
from pathlib import Path

from hpcsolve import __version__, backends
from hpcsolve import family as families
from hpcsolve.cases import CaseBase, load_case, parse_case_text
from hpcsolve.checkpoint import check_compatible, latest_checkpoint
from hpcsolve.errors import BackendError, CaseError, HpcsolveError, RunInterrupted
from hpcsolve.family import Description
from hpcsolve.precision import Precision, get_precision
from hpcsolve.results import Result

RESULT_FILES = ("result.h5", "summary.json")


def prepare(case: CaseBase | str | Path, backend: str | None = None, precision: str | Precision | None = None,
            overrides=()) -> tuple[CaseBase, backends.Backend, Precision]:
    """The validated case, the usable Backend and the Precision policy of a run (each chosen once)."""
    if not isinstance(case, CaseBase):
        case = load_case(case, overrides)
    elif overrides:
        case = case.with_overrides(*overrides)
    backend = backends.resolve(backend or case.run.backend, field="backend" if backend else "run.backend")
    policy = get_precision(precision or case.run.precision, family=case.solver,
                           field="precision" if precision else "run.precision")
    return case, backend, policy


def describe(case, backend=None, precision=None, overrides=(), *, estimate: bool = False) -> dict:
    """Derived parameters and memory estimate of a case, without running it.

    With ``estimate``, also the memory available on the chosen device and a run-time estimate from
    a short timed probe of the chosen backend (a few steps or iterations; nothing is written)."""
    case, backend, policy = prepare(case, backend, precision, overrides)
    family = families.get(case.solver)
    desc = family.describe(case, backend, policy)
    info = {"case": case.name, "solver": case.solver, "backend": backend.name, "precision": policy.name}
    info.update(desc.as_dict())
    if estimate:
        free = available_memory(backend)
        if free is not None:
            info["device_memory_free_bytes"] = free
        if not desc.note:   # a case too large to describe fully is not probed either
            info.update(family.estimate_runtime(case, backend, policy, desc))
    return info


def plan(case, backend=None, precision=None, overrides=()):
    """(case, Backend, Precision, Description): a run chosen and described once; pass the description
    to ``run_case`` (several times, e.g. a warm-up and a timed run) so its setup is built once."""
    case, backend, policy = prepare(case, backend, precision, overrides)
    return case, backend, policy, families.get(case.solver).describe(case, backend, policy)


def memory_needed(info: dict) -> int | None:
    need = info.get("memory_bytes")
    return int(need) if isinstance(need, (int, float)) else None


def available_memory(backend) -> int | None:
    """Free memory where the state of ``backend`` lives: device memory for GPUs, RAM for the CPU."""
    return backends.get(backend).available_memory()


def check_memory(desc: "Description | dict", backend) -> None:
    """Refuse a run whose estimated memory does not fit, before anything is allocated: the solver
    state where the backend keeps it, and the setup arrays built on the host."""
    backend = backends.get(backend)
    info = desc.as_dict() if isinstance(desc, Description) else desc
    need, free = memory_needed(info), available_memory(backend)
    checks = [(need, free, "device" if backend.gpu else "host")]
    host_need = info.get("host_memory_bytes")
    if host_need:
        host_total = host_need + (need or 0 if not backend.gpu else 0)
        checks.append((host_total, backends.host_memory_available(), "host"))
    for need_b, free_b, where in checks:
        if need_b is not None and free_b is not None and need_b > free_b:
            raise CaseError(f"the run needs about {need_b / 2**30:.2f} GiB but only {free_b / 2**30:.2f} GiB of "
                            f"{where} memory is free on {backend.device_name if where == 'device' else 'this machine'}; "
                            f"reduce the resolution / mesh size, use a smaller precision, or another backend",
                            field="memory", value=need_b)


class StopRequest:
    """Set by SIGINT/SIGTERM; a runner polls ``requested`` between chunks of work and stops cleanly."""

    def __init__(self):
        self.requested = False
        self.signal = None


@contextmanager
def _stop_on_signals(graceful: bool):
    """SIGINT and SIGTERM: with a graceful runner, the first one asks it to stop at the next
    monitor point (it writes a checkpoint and a summary marked 'interrupted'); a second one, or
    any with a runner that cannot stop gracefully, raises KeyboardInterrupt at once."""
    stop = StopRequest()

    def handler(signum, frame):
        if graceful and not stop.requested:
            stop.requested, stop.signal = True, signum
            return
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread: leave signals alone
        previous = {}
    try:
        yield stop
    finally:
        for sig, h in previous.items():
            signal.signal(sig, h)


def _gpu_error(exc: Exception, backend) -> BackendError | None:
    return backends.get(backend).gpu_error(exc)


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
        "backend": str(backend),
        "precision": policy.name,
        "device": backends.get(backend).device_name,
        "packages": backends.package_versions(),
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "case_file": str(case.path) if case.path else "",
        "overrides": list(case.overrides),
    }


def _finished_status(run_dir) -> str:
    """The status in ``run_dir/summary.json`` when that run finished (not interrupted), else ''."""
    import json

    try:
        status = json.loads((Path(run_dir) / "summary.json").read_text()).get("status", "")
    except (OSError, ValueError, AttributeError):
        return ""
    return status if status not in ("", "interrupted") else ""


def prepare_resume(resume_dir: str | Path, case=None, backend=None, precision=None, overrides=(),
                   force: bool = False):
    """The case, backend, precision and checkpoint to continue the run in ``resume_dir``.

    Without ``case`` the case recorded in the checkpoint is used; with one, it must match (or ``force``)."""
    ckpt = latest_checkpoint(resume_dir)
    finished = _finished_status(resume_dir)
    if finished and not force:
        raise CaseError.invalid("--resume", str(resume_dir), "a folder of an interrupted run",
                                why=f"the run there already finished (status {finished!r}); resuming would run it "
                                    "again from its newest checkpoint and replace the result: add --force for that")
    meta = ckpt.meta
    if case is None:
        case_file = Path(meta["case_file"]) if meta.get("case_file") else None
        case = parse_case_text(meta["case_text"], meta.get("overrides", []), path=case_file)
        if overrides:
            case = case.with_overrides(*overrides)
    case, backend, policy = prepare(case, backend or meta.get("backend"), precision or meta.get("precision"),
                                    overrides if not isinstance(case, CaseBase) else ())
    check_compatible(ckpt, case_json=case.effective_json(), backend=backend, precision=policy.name, force=force)
    return case, backend, policy, ckpt


def run_case(case: CaseBase | str | Path | None, backend: str | None = None, precision: str | Precision | None = None,
             *, out: str | Path | None = None, overrides=(), progress: bool = True, overwrite: bool = False,
             plots: bool = True, resume: str | Path | None = None, force: bool = False,
             description: Description | None = None) -> Result:
    """Run a case and return its Result; with ``out``, also write the result files there.

    ``case``: a case file path, a loaded case (``hpcsolve.load_case``) or None with ``resume``.
    ``backend``: 'auto', 'numpy', 'cupy', 'numba-cuda' or a Backend (default: the case's ``run.backend``).
    ``precision``: 'fp64', 'fp32', 'fp16s' (LBM), 'mixed' (FEM) or a Precision (default: ``run.precision``).
    ``overrides``: ``["key.path=value", ...]`` as with ``--set`` (TOML values). ``progress``: a progress
    bar on stderr. ``overwrite``: replace a result already in ``out``. ``plots``: write plots/*.png.
    ``resume``: a run folder holding checkpoints; the run continues from the newest one and writes
    its results there (``case`` may be None: the checkpoint's case is used). ``description``: the
    family's ``describe`` of this case, backend and precision, made earlier (``plan``); its setup
    (LBM geometry, FEM mesh) is reused instead of built again."""
    ckpt = None
    if resume is not None:
        case, backend, policy, ckpt = prepare_resume(resume, case, backend, precision, overrides, force)
        out, overwrite = Path(resume), True
    else:
        case, backend, policy = prepare(case, backend, precision, overrides)
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        check_out_dir(out_path, overwrite)
    family = families.get(case.solver)
    desc = description if description is not None else family.describe(case, backend, policy)
    check_memory(desc, backend)
    caps = family.capabilities
    if ckpt is not None and "resume" not in caps:
        raise CaseError.invalid("--resume", str(resume), "a run of a solver family that checkpoints (lbm)")
    try:
        with _stop_on_signals(graceful="graceful_stop" in caps) as stop, backend.run_context():
            threads = backends.thread_pools()
            result = family.run(case, backend, policy, description=desc, progress=progress,
                                stop=stop if "graceful_stop" in caps else None,
                                checkpoint_dir=out_path if "checkpoint" in caps else None, resume=ckpt)
    except KeyboardInterrupt:
        # a runner that cannot stop gracefully: record that the run was interrupted (nothing else
        # was computed that could be kept), so the folder does not look like an unfinished run
        exc = RunInterrupted(f"{case.name}: interrupted before it finished; nothing to resume")
        if out_path is not None:
            partial = Result(case.name, case.solver, backend, policy.name, status="interrupted",
                             message="interrupted by a signal before the solve finished")
            _finish(partial, case, backend, policy)
            partial.write(out_path, plots=False)
        raise exc from None
    except HpcsolveError as exc:
        partial = getattr(exc, "result", None)
        if partial is not None and out_path is not None:
            _finish(partial, case, backend, policy)
            partial.write(out_path, plots=plots)
        raise
    except Exception as exc:
        err = _gpu_error(exc, backend)
        if err is None:
            raise
        raise err from exc
    result.provenance["cpu_threads"] = backends.cpu_threads()
    result.provenance["thread_pools"] = threads
    _finish(result, case, backend, policy)
    if out_path is not None:
        result.write(out_path, plots=plots)
    return result


def _finish(result: Result, case: CaseBase, backend: str, policy: Precision) -> None:
    result.provenance = {**provenance(case, backend, policy), **result.provenance}
    result.case_text = case.text
    result.case_json = case.effective_json()
