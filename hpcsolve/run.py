"""case -> solver -> Result: the one entry point the CLI and notebooks use."""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib
import inspect
import math
import platform
import socket
from pathlib import Path

import numpy as np

from hpcsolve import __version__, backends, interrupts, outdir
from hpcsolve.cases import CaseBase, load_case, parse_case_text
from hpcsolve.checkpoint import check_compatible, latest_checkpoint, list_checkpoints
from hpcsolve.errors import BackendError, CaseError, HpcsolveError, RunInterrupted
from hpcsolve.precision import Precision, get_precision
from hpcsolve.results import Result

RESULT_FILES = outdir.RESULT_FILES


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


def describe(case, backend=None, precision=None, overrides=(), *, estimate: bool = False) -> dict:
    """Derived parameters and memory estimate of a case, without running it.

    With ``estimate``, also the memory available on the chosen device and a run-time estimate from
    a short timed probe of the chosen backend (a few steps or iterations; nothing is written)."""
    case, backend, policy = prepare(case, backend, precision, overrides)
    info = {"case": case.name, "solver": case.solver, "backend": backend, "precision": policy.name}
    info.update(family_runner(case.solver).describe(case, backend, policy))
    if estimate:
        free = available_memory(backend)
        if free is not None:
            info["device_memory_free_bytes"] = free
        if "note" not in info:   # a case too large to describe fully is not probed either
            info.update(estimate_runtime(case, backend, policy, info))
    return info


def memory_needed(info: dict) -> int | None:
    for key in ("memory_bytes", "memory_estimate_bytes"):
        if isinstance(info.get(key), (int, float)):
            return int(info[key])
    return None


def available_memory(backend: str) -> int | None:
    """Free memory where the state of ``backend`` lives: device memory for GPUs, RAM for the CPU."""
    mem = backends.device_memory_bytes(backend)
    if mem is not None:
        return mem[0]
    return backends.host_memory_available()


def check_memory(info: dict, backend: str) -> None:
    """Refuse a run whose estimated peak memory (hpcsolve.memory) does not fit, before anything is
    allocated: the device memory of a GPU backend, and the host memory of the process."""
    field = info.get("memory_reduce_field", "the problem size")
    checks = [(info.get("host_memory_bytes"), backends.host_memory_available(), "host memory", "this machine")]
    if backends.is_gpu(backend):
        device = backends.device_memory_bytes(backend)
        checks.insert(0, (info.get("device_memory_bytes"), device[0] if device else None, "device memory",
                          backends.device_name(backend)))
    for need, free, what, where in checks:
        if need is not None and free is not None and need > free:
            raise CaseError(f"the run would not fit: it needs about {need / 2**30:.2f} GiB of {what} but only "
                            f"{free / 2**30:.2f} GiB are free on {where}; reduce {field}, use a smaller "
                            f"precision, or another backend", field=field.split(" ")[0], value=need)


def estimate_runtime(case: CaseBase, backend: str, policy: Precision, info: dict) -> dict:
    """A rough run-time estimate from a short timed probe on the chosen backend."""
    if case.solver == "lbm":
        from hpcsolve.lbm.stepper import LBMSetup, get_stepper

        n = 1024 if backends.is_gpu(backend) else 128
        stepper = get_stepper(backend, LBMSetup(flags=np.zeros((n, n), np.uint8), relaxation_time=0.8,
                                                collision=case.lattice.collision, policy=policy,
                                                in_place=case.lattice.streaming == "in-place"))
        stepper.step(2)
        with backends.Timer(backend) as t:
            stepper.step(10)
        mlups = 10 * n * n / max(t.seconds, 1e-9) / 1e6
        work = float(info.get("steps", 0)) * float(info.get("fluid_cells", 0))
        return {"probe_mlups": mlups, "estimated_seconds": work / (mlups * 1e6) if mlups > 0 else math.nan,
                "estimate_basis": f"{info.get('steps')} steps x {info.get('fluid_cells')} fluid cells at the probe's "
                                  f"{mlups:.1f} MLUPS ({n}x{n} periodic, 10 steps); upper bound if steady state stops it early"}
    if case.solver == "fem":
        from hpcsolve.fem import problem, solve

        disc = problem.build(case)
        problem.check_scales(disc, policy.storage_bytes)   # what run refuses, the probe does not try
        probe_its = 20
        method = "cg" if not policy.refinement else None
        solve(disc.A, disc.b, precision=policy, backend=backend, rtol=1e-300, maxiter=2, method=method)  # warm-up
        _, rep = solve(disc.A, disc.b, precision=policy, backend=backend, rtol=1e-300, maxiter=probe_its,
                       method=method)
        per_it = rep.time_s / max(rep.iterations, 1)
        ncomp = 1 if case.problem.kind == "poisson" else 2
        side = math.sqrt(disc.A.shape[0] / ncomp)
        kappa = (2 * side / math.pi) ** 2 * (1 if ncomp == 1 else 20)
        its = 0.5 * math.sqrt(kappa) * math.log(2 / case.solve.rtol)
        return {"probe_seconds_per_iteration": per_it, "estimated_iterations": int(its),
                "estimated_seconds": its * per_it,
                "estimate_basis": "CG iterations ~ sqrt(kappa)/2 ln(2/rtol) with kappa ~ (2 sqrt(n)/pi)^2 "
                                  "(Poisson-like; rough), times a 20-iteration probe"}
    return {}


StopRequest = interrupts.StopRequest   # the stop request runners poll (SIGINT/SIGTERM)


_GPU_ERROR_MODULES = ("cupy", "cupy_backends", "cupyx", "numba.cuda", "cuda")


def _gpu_error(exc: Exception, backend: str) -> BackendError | None:
    mod = type(exc).__module__ or ""
    if backends.is_gpu(backend) and (mod.startswith(_GPU_ERROR_MODULES) or "CUDA" in type(exc).__name__):
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = ("reduce the problem size or use a smaller precision" if "memory" in text.lower()
                else "check `hpcsolve info` and the driver (nvidia-smi)")
        return BackendError(f"{backend}: GPU error ({type(exc).__name__}): {text}; {hint}")
    return None


def default_out_dir(case: CaseBase, backend: str, policy: Precision) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("results") / f"{case.name}-{backend}-{policy.name}-{stamp}"


def check_out_dir(out: Path, overwrite: bool, resume: bool = False) -> None:
    """Refuse an output folder that cannot take the run, before anything runs (hpcsolve.outdir)."""
    outdir.check(out, overwrite=overwrite, resume=resume)


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


def prepare_resume(resume_dir: str | Path, case=None, backend=None, precision=None, overrides=(),
                   force: bool = False):
    """The case, backend, precision and checkpoint to continue the run in ``resume_dir``.

    Without ``case`` the case recorded in the checkpoint is used; with one, it must match (or ``force``)."""
    ckpt = latest_checkpoint(resume_dir)
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
             plots: bool = True, resume: str | Path | None = None, force: bool = False) -> Result:
    """Run a case and return its Result; with ``out``, also write the result files there.

    ``resume``: a run folder holding checkpoints; the run continues from the newest one and writes
    its results there (``case`` may be None: the checkpoint's case is used)."""
    ckpt = None
    if resume is not None:
        case, backend, policy, ckpt = prepare_resume(resume, case, backend, precision, overrides, force)
        out, overwrite = Path(resume), True
    else:
        case, backend, policy = prepare(case, backend, precision, overrides)
    out_path = Path(out) if out is not None else None
    if out_path is not None:
        check_out_dir(out_path, overwrite, resume=resume is not None)
    runner = family_runner(case.solver)
    check_memory(runner.describe(case, backend, policy), backend)
    accepts = inspect.signature(runner.run).parameters
    kwargs = {}
    if "checkpoint_dir" in accepts:
        kwargs["checkpoint_dir"] = out_path
    if ckpt is not None:
        if "resume" not in accepts:
            raise CaseError.invalid("--resume", str(resume), "a run of a solver family that checkpoints (lbm)")
        kwargs["resume"] = ckpt
    claim = (outdir.claim(out_path, overwrite=overwrite, resume=resume is not None) if out_path is not None
             else contextlib.nullcontext())
    with claim, interrupts.stop_on_signals(graceful="stop" in accepts) as stop:
        if "stop" in accepts:
            kwargs["stop"] = stop
        result = _run_and_write(runner, case, backend, policy, kwargs, out_path, progress, plots)
    return result


def _run_and_write(runner, case, backend, policy, kwargs, out_path, progress, plots) -> Result:
    """The runner, then the result folder; a partial result is written where the run stopped early.
    Once the runner has returned or raised, signals only request a stop (the folder is written first)."""
    try:
        try:
            result = runner.run(case, backend, policy, progress=progress, **kwargs)
        except HpcsolveError as exc:
            with interrupts.deferred():
                partial = getattr(exc, "result", None)
                if partial is not None and out_path is not None:
                    _finish(partial, case, backend, policy)
                    partial.write(out_path, plots=plots)
            raise
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            err = _gpu_error(exc, backend)
            if err is None:
                raise
            raise err from exc
        with interrupts.deferred():
            _finish(result, case, backend, policy)
            if out_path is not None:
                result.write(out_path, plots=plots)
        return result
    except KeyboardInterrupt:
        # stopped at once (a second signal, or a runner that cannot stop gracefully): the folder
        # says so, and where the newest checkpoint is, if there is one
        with interrupts.deferred():
            exc = RunInterrupted(f"{case.name}: interrupted before it finished; {_resume_hint(out_path)}")
            if out_path is not None:
                partial = Result(case.name, case.solver, backend, policy.name, status="interrupted",
                                 message=f"interrupted by a signal before the run finished; {_resume_hint(out_path)}")
                _finish(partial, case, backend, policy)
                partial.write(out_path, plots=False)
        raise exc from None


def _resume_hint(out_path: Path | None) -> str:
    newest = list_checkpoints(out_path)[-1:] if out_path is not None else []
    if not newest:
        return "nothing to resume"
    return f"resume from {newest[0].name} with: hpcsolve run --resume {out_path}"


def _finish(result: Result, case: CaseBase, backend: str, policy: Precision) -> None:
    result.provenance = {**provenance(case, backend, policy), **result.provenance}
    result.case_text = case.text
    result.case_json = case.effective_json()
