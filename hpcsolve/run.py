"""case -> solver -> Result: the one entry point the CLI and notebooks use."""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import platform
import socket
import warnings
from pathlib import Path

from hpcsolve.core.version import __version__
from hpcsolve.core import backends, heartbeat, interrupts, outdir, parallel
from hpcsolve.core import family as families
from hpcsolve.core.cases import CaseBase, load_case, parse_case_text
from hpcsolve.core.checkpoint import (MISSING, CheckpointError, case_hash, check_compatible, check_same_run,
                                     latest_checkpoint, list_checkpoints)
from hpcsolve.core.errors import BackendError, CaseError, HpcsolveError, OutputError, RunInterrupted
from hpcsolve.core.family import Description
from hpcsolve.core.precision import Precision, get_precision
from hpcsolve.core.results import Result, human_duration
from hpcsolve.core.safe_io import read_json, regular_file
from hpcsolve.core.verdicts import warning_text

RESULT_FILES = outdir.RESULT_FILES

#: a run's status and ``hpcsolve run``'s exit code: the statuses that fail the user's question exit EXIT_FAILED (3):
#: "blew_up" (NaN/Inf) and "not_converged" (a solve that missed rtol without a solution known to be good enough).
#: The others exit 0: "completed", "converged", "not_steady" (ran its full time; the fields are valid) and
#: "accurate_to_discretisation" (an FEM solve that missed rtol, e.g. fp32 stalled at its floor, whose solution differs
#: from the float64 one by at most NEGLIGIBLE_FRACTION of the discretisation error: hpcsolve.fem.judge; the question
#: "is this precision accurate enough on my mesh" is answered yes). "interrupted" exits 130 (a signal).
FAILED_STATUSES = ("blew_up", "not_converged")
EXIT_FAILED = 3


def exit_code(status: str) -> int:
    """``hpcsolve run``'s exit code for a finished run's ``status`` (before ``run.strict_validation``): EXIT_FAILED
    for FAILED_STATUSES, else 0 (see FAILED_STATUSES)."""
    return EXIT_FAILED if status in FAILED_STATUSES else 0


def as_names(value, name: str) -> list:
    """A list argument of the Python API (overrides, backends, precisions): one string is a list of one (it used
    to be split into its characters), None an empty list; anything else but a list or tuple is a CaseError."""
    if value is None:
        return []
    if isinstance(value, (str, Path)):
        return [str(value)]
    if isinstance(value, (list, tuple)):
        return list(value)
    raise CaseError.invalid(name, repr(value)[:80], "a list of texts (or one text)")


def out_folder_arg(out) -> Path | None:
    """The ``out`` argument of the Python API as a Path (None: none); an empty one is refused, since Path("") is
    the working directory (the CLI refuses ``--out ''`` the same way), and so is anything but a str or a Path."""
    if out is None:
        return None
    if not isinstance(out, (str, os.PathLike)) or isinstance(os.fspath(out), bytes):
        raise OutputError.invalid("out", repr(out), "a folder path (str or pathlib.Path)",
                                  why=f"its type is {type(out).__name__}")
    if str(out).strip() == "":
        raise OutputError.invalid("out", str(out), "a folder path", why="it is empty")
    return Path(out)


def prepare(case: CaseBase | str | Path, backend: str | None = None, precision: str | Precision | None = None,
            overrides=()) -> tuple[CaseBase, backends.Backend, Precision]:
    """The validated case, the usable Backend and the Precision policy of a run (each chosen once)."""
    overrides = as_names(overrides, "overrides")
    for name, value in (("backend", backend), ("precision", precision)):
        if isinstance(value, str) and not value.strip():      # "" used to mean the case's own, silently
            raise CaseError.invalid(name, value, "a name, or None for the case's run." + name)
    if not isinstance(case, CaseBase):
        if not isinstance(case, (str, os.PathLike)) or isinstance(os.fspath(case), bytes):
            raise CaseError.invalid("case", repr(case), "a case file path (str or pathlib.Path) or a loaded case "
                                    "(hpcsolve.load_case)", why=f"its type is {type(case).__name__}")
        # the GPU's start (CuPy's import, the driver, the context) beside the case's validation
        warm: list = []

        def start_probe(data):
            try:
                warm.append(backends.prewarm(backend or _backend_asked(data)))
            except Exception:       # noqa: BLE001  (an optimisation: the case's own errors are what the user sees)
                pass

        try:
            case = load_case(case, overrides, before_validation=start_probe)
        except BaseException:
            for thread in warm:     # not leave the driver mid-start when the process exits on the case's error
                if thread is not None:
                    thread.join(PROBE_JOIN_SECONDS)
            raise
    else:       # validated again as a whole: edits to a loaded case's fields skip the rules across fields
        case = case.with_overrides(*overrides)
    backend = backends.resolve(backend or case.run.backend, field="backend" if backend else "run.backend")
    policy = get_precision(precision or case.run.precision, family=case.solver,
                           field="precision" if precision else "run.precision")
    return case, backend, policy


#: how long a case that fails validation waits for the GPU probe it started (CuPy's import and the CUDA context:
#: under a second on the H200 machine) before its error goes on
PROBE_JOIN_SECONDS = 30.0


def _backend_asked(data: dict) -> str:
    """The ``run.backend`` of a parsed, not yet validated case table ("auto" where it has none; "" where it is
    not a name: the validation says why)."""
    run = data.get("run", {})
    value = run.get("backend", "auto") if isinstance(run, dict) else ""
    return value if isinstance(value, str) else ""


def describe(case, backend=None, precision=None, overrides=(), *, estimate: bool = False,
             check: bool = False) -> dict:
    """Derived parameters and memory estimate of a case, without running it.

    With ``check`` (``hpcsolve validate``), also the family's ``check_inputs`` (FEM: the assembled system's
    number range, which the run would otherwise find only after assembly).

    With ``estimate``, also the memory available on the chosen device and a run-time estimate (nothing is
    written): LBM, a timed probe on the chosen backend (a few seconds of steps, or a coarser copy of a steady case
    run to its stop); FEM, a model that times nothing (hpcsolve.fem.estimate: iterations from a small NumPy solve
    on a coarser mesh, time from bytes moved), so the same call gives the same answer."""
    case, backend, policy = prepare(case, backend, precision, overrides)
    family = families.get(case.solver)
    desc = family.describe(case, backend, policy)
    info = {"case": case.name, "solver": case.solver, "backend": backend.name, "precision": policy.name}
    info.update(desc.as_dict())
    if check:
        info.update(family.check_inputs(case, backend, policy, desc))
    if estimate:
        free = available_memory(backend) if backend.gpu else None       # a CPU run has no device memory
        if free is not None:
            info["device_memory_free_bytes"] = free
        try:
            check_memory(desc, backend)   # the probe allocates the run's state: only when the run fits
        except CaseError as exc:
            info["estimate_basis"] = f"not probed: {exc}"
            return info
        if not desc.note:   # a case too large to describe fully is not probed either
            try:
                with backend.run_context():     # the threads the run itself is pinned to (BLAS, OpenMP)
                    info.update(_with_duration(family.estimate_runtime(case, backend, policy, desc)))
            except Exception as exc:
                err = _gpu_error(exc, backend)
                if err is None:
                    raise
                raise err from exc
    return info


def _with_duration(estimate: dict) -> dict:
    """The estimate with ``estimated_duration`` (e.g. '4 h 01 min') right after ``estimated_seconds``."""
    out = {}
    for k, v in estimate.items():
        out[k] = v
        if k == "estimated_seconds":
            out["estimated_duration"] = human_duration(v)
    return out


def plan(case, backend=None, precision=None, overrides=()):
    """(case, Backend, Precision, Description): a run chosen and described once; pass the description
    to ``run_case`` (several times, e.g. a warm-up and a timed run) so its setup is built once."""
    case, backend, policy = prepare(case, backend, precision, overrides)
    desc = families.get(case.solver).describe(case, backend, policy)
    desc.made_for = _run_key(case, backend, policy)
    return case, backend, policy, desc


def _run_key(case, backend, policy) -> str:
    """What a description was made for: the case's effective values, the backend and the precision."""
    text = "\n".join([case.effective_json(), backends.get(backend).name, policy.name])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _check_description(description, case, backend, policy) -> None:
    """A ``description`` passed to ``run_case`` must be a Description made (``plan``) for this case, backend and
    precision: another run's setup (its mesh or geometry) would be run silently."""
    if not isinstance(description, Description):
        raise CaseError.invalid("description", repr(description)[:80], "the Description of run.plan(...)",
                                why=f"its type is {type(description).__name__}")
    if description.made_for and description.made_for != _run_key(case, backend, policy):
        raise CaseError.invalid("description", f"made for another run ({description.made_for})",
                                "the Description that run.plan returned for this case, backend and precision",
                                why="its setup (mesh, geometry) belongs to a different case, backend or precision")


def memory_needed(info: dict) -> int | None:
    need = info.get("memory_bytes")
    return int(need) if isinstance(need, (int, float)) else None


def available_memory(backend) -> int | None:
    """Free memory where the state of ``backend`` lives: device memory for GPUs, RAM for the CPU."""
    return backends.get(backend).available_memory()


def check_memory(desc: "Description | dict", backend) -> None:
    """Refuse a run whose estimated peak memory (hpcsolve.core.memory) does not fit, before anything is
    allocated: the device memory of a GPU backend, and the host memory of the process."""
    backend = backends.get(backend)
    info = desc.as_dict() if isinstance(desc, Description) else desc
    field = info.get("memory_reduce_field", "the problem size")
    checks = [(info.get("host_memory_bytes"), backends.host_memory_available(), "host memory", "this machine")]
    if backend.gpu:
        checks.insert(0, (info.get("device_memory_bytes"), available_memory(backend), "device memory",
                          backend.device_name))
    for need, free, what, where in checks:
        if need is not None and free is not None and need > free:
            raise CaseError(f"the run would not fit: it needs about {need / 2**30:.2f} GiB of {what} but only "
                            f"{free / 2**30:.2f} GiB are free on {where}; reduce {field}, use a smaller "
                            f"precision, or another backend", field=field.split(" ")[0], value=need)


StopRequest = interrupts.StopRequest   # the stop request runners poll (SIGINT/SIGTERM)


def _gpu_error(exc: Exception, backend) -> BackendError | None:
    return backends.get(backend).gpu_error(exc)


def default_out_dir(case: CaseBase, backend: str, policy: Precision) -> Path:
    """results/<case>-<backend>-<precision>-<time>, created now (:func:`outdir.new_folder`): a second run of the
    same setup within the same second (a script's loop of small cases, or two started at once) gets -2, -3, ...
    rather than the first run's folder."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return outdir.new_folder(Path("results") / f"{case.name}-{backend}-{policy.name}-{stamp}")


def check_out_dir(out: Path, overwrite: bool, resume: bool = False) -> None:
    """Refuse an output folder that cannot take the run, before anything runs (hpcsolve.core.outdir)."""
    outdir.check(out, overwrite=overwrite, resume=resume)


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
        "ranks": parallel.ranks(parallel.world()),
    }


def _finished_status(run_dir) -> str:
    """The status in ``run_dir/summary.json`` when that run finished (not interrupted), else ''."""
    path, allowed = Path(run_dir) / "summary.json", "a run folder whose summary.json is a regular file"
    if not os.path.lexists(path):
        return ""
    # a pipe, a device, a link loop or a huge file is refused unopened (exit 2): a pipe used to block the resume
    regular_file(path, "--resume", allowed, max_bytes=outdir.SUMMARY_MAX_BYTES)
    try:
        status = read_json(path, "--resume", allowed, max_bytes=outdir.SUMMARY_MAX_BYTES).get("status", "")
    except (OSError, ValueError, AttributeError):     # unreadable text: no finished run to protect
        return ""
    return status if status not in ("", "interrupted") else ""


def prepare_resume(resume_dir: str | Path, case=None, backend=None, precision=None, overrides=(),
                   force: bool = False):
    """The case, backend, precision and checkpoint to continue the run in ``resume_dir``.

    Without ``case`` the case recorded in the checkpoint is used; with one, it must match (or ``force``).
    A checkpoint whose recorded case is missing or does not load counts as damaged, with a case given too (the
    same checkpoint is chosen either way: ``run_case`` calls this again with the case): the previous one is used."""
    overrides = as_names(overrides, "overrides")
    comm = parallel.world()
    refused = None
    if comm.Get_rank() == 0:         # checkpoints a killed --overwrite run hid come back (or go) first
        try:
            outdir.settle_idle(resume_dir)
        except OutputError as exc:   # another run holds the folder: every rank stops with rank 0's error
            refused = str(exc)
    refused = comm.bcast(refused, root=0)   # (also the barrier: every rank chooses among the settled files)
    if refused is not None:
        raise OutputError(refused, field="--resume")
    skipped: list = []
    ckpt, recorded = latest_checkpoint(resume_dir, use=lambda c: (c, _checkpoint_case(c)), skipped=skipped)
    _check_same_run(resume_dir, ckpt, force)
    _warn_skipped(skipped, ckpt)
    if case is None:
        case = recorded.with_overrides(*overrides) if overrides else recorded
    finished = _finished_status(resume_dir)
    if finished and not force:
        raise CaseError.invalid("--resume", str(resume_dir), "a folder of an interrupted run",
                                why=f"the run there already finished (status {finished!r}); resuming would run it "
                                    "again from its newest checkpoint and replace the result: add --force for that")
    meta = ckpt.meta
    case, backend, policy = prepare(case, backend or meta.get("backend"), precision or meta.get("precision"),
                                    overrides if not isinstance(case, CaseBase) else ())
    check_compatible(ckpt, case_json=case.effective_json(), backend=backend, precision=policy.name, force=force)
    return case, backend, policy, ckpt


def _check_same_run(resume_dir, ckpt, force: bool) -> None:
    """The chosen checkpoint belongs to the run of its folder (``checkpoint.check_same_run``): one of another case is
    refused naming both; with ``force`` it is resumed, with one warning naming both."""
    for diff in check_same_run(resume_dir, ckpt, force):
        warnings.warn(f"--resume --force: a checkpoint of another case than the folder's run: {diff}", stacklevel=1)


def _warn_skipped(skipped: list, chosen, said: set | None = None) -> None:
    """One warning per checkpoint passed over (``skipped``: (path, why) from ``latest_checkpoint``) for
    ``chosen``; ``said``: the paths already warned about (updated)."""
    for path, why in skipped:
        if said is not None:
            if path in said:
                continue
            said.add(path)
        warnings.warn(f"{why}; resuming from the older {chosen.path.name} (step {chosen.step}) instead",
                      stacklevel=1)


def _checkpoint_case(ckpt) -> CaseBase:
    """The case recorded in ``ckpt`` (meta.case_text with meta.overrides); a CheckpointError naming the
    checkpoint and the field where it is missing or does not load."""
    meta = ckpt.meta
    if not meta.get("case_text"):
        raise ckpt.error("meta.case_text", meta.get("case_text", MISSING), "the TOML text of the run's case",
                         why=None if "case_text" not in meta else "empty")
    try:
        # parsed as "meta.case_text", not as the case file it came from: an error names the checkpoint's field
        case = parse_case_text(meta["case_text"], meta.get("overrides", []), path=Path("meta.case_text"))
    except CaseError as exc:
        field = "meta.overrides" if exc.field == "--set" else "meta.case_text"
        value = meta.get("overrides") if field == "meta.overrides" else meta["case_text"]
        raise ckpt.error(field, value, why=f"the case recorded there does not load: {exc}") from None
    # relative paths in the case (meshes) resolve against the folder of the case file
    case._path = Path(meta["case_file"]) if meta.get("case_file") else None
    return case


def run_case(case: CaseBase | str | Path | None, backend: str | None = None, precision: str | Precision | None = None,
             *, out: str | Path | None = None, overrides=(), progress: bool = True, overwrite: bool = False,
             plots: bool = True, resume: str | Path | None = None, force: bool = False,
             description: Description | None = None) -> Result:
    """Run a case and return its Result; with ``out``, also write the result files there.

    Parameters
    ----------
    case : CaseBase, str, Path or None
        A case file path, a loaded case (:func:`hpcsolve.load_case`), or None with ``resume`` (the checkpoint's case).
    backend : str or Backend, optional
        'auto', 'numpy', 'cupy', 'numba-cuda' or a Backend (default: the case's ``run.backend``).
    precision : str or Precision, optional
        A name in ``hpcsolve.core.precision.POLICIES`` ('fp64', 'fp32', 'fp16s', 'fp16c' for LBM; 'fp64', 'fp32',
        'mixed' for FEM) or a Precision (default: the case's ``run.precision``).
    out : str or Path, optional
        Folder for result.h5, result.xdmf, summary.json and plots/*.png (None: nothing is written).
    overrides : sequence of str
        ``["key.path=value", ...]`` as with ``--set`` (TOML values).
    progress : bool
        A progress bar on stderr.
    overwrite : bool
        Replace a result already in ``out``.
    plots : bool
        Write plots/*.png.
    resume : str or Path, optional
        A run folder holding checkpoints: the run continues from the newest one and writes its results there.
    force : bool
        With ``resume``, continue a checkpoint of another case or a finished run; an LBM lattice known to blow up
        (hpcsolve.lbm.units: the cell Reynolds number above its limit) is refused without it.
    description : Description, optional
        The family's ``describe`` of this case, backend and precision, made earlier (``plan``): its setup (LBM
        geometry, FEM mesh) is reused instead of built again.

    Returns
    -------
    Result
        Fields, snapshots, series, metrics, timings and provenance; ``validation`` holds the verdicts on its values
        against their published or analytic references (hpcsolve.core.verdicts; also in summary.json and
        result.h5). A value outside its range leaves the status as it is and warns (one UserWarning line naming
        each value, its range and by how much); ``Result.validation_failed`` says so.

    Raises
    ------
    CaseError
        A bad case, override, precision for the family, or a run that does not fit in memory (before anything
        is allocated).
    BackendError
        The backend cannot run here (and says why).
    OutputError
        ``out`` holds another result (without ``overwrite``) or cannot be written.
    BlowUpError
        The run produced NaN/Inf (LBM): the message names the step; the last good fields are written to ``out``
        and kept on the exception (``exc.result``).

    Notes
    -----
    ``run.strict_validation`` does not raise here: the caller decides (``hpcsolve run`` exits 3). Long because its
    docstring is the API reference; the body is the run's one sequence (prepare, claim the folder, run, write).

    Examples
    --------
    A 16 x 16 lid-driven cavity in float32 on the NumPy backend (a fraction of a second):

    >>> import tempfile
    >>> from pathlib import Path
    >>> import hpcsolve
    >>> cases = Path(hpcsolve.__file__).resolve().parents[1] / "cases"      # the repository's case files
    >>> case = hpcsolve.load_case(cases / "lid_driven_cavity.toml", ["lattice.resolution=16", "time.end_time=2",
    ...                           "steady.enabled=false", 'validation.reference="none"'])
    >>> out = Path(tempfile.mkdtemp()) / "cavity"
    >>> result = hpcsolve.run_case(case, "numpy", "fp32", out=out, progress=False, plots=False)
    >>> result.status, result.metrics["steps"], result.fields["velocity"].shape    # 16 cells + 2 walls across
    ('completed', 320, (18, 18, 2))
    >>> sorted(p.name for p in out.iterdir())
    ['manifest.json', 'result.h5', 'result.xdmf', 'summary.json']
    """
    ckpt = None
    if resume is not None:
        case, backend, policy, ckpt = prepare_resume(resume, case, backend, precision, overrides, force)
        out, overwrite = Path(resume), True
    else:
        case, backend, policy = prepare(case, backend, precision, overrides)
    out_path = out_folder_arg(out)
    comm = parallel.world()
    if parallel.ranks(comm) > 1:       # mpiexec -n N: every rank runs the same case, rank 0 writes
        parallel.check_same(comm, "case", "\n".join([case.effective_json(), str(backend), policy.name,
                                                     str(resume or "")]))
        if comm.Get_rank() != 0:
            out_path, progress, plots = None, False, False
    if out_path is not None:
        check_out_dir(out_path, overwrite, resume=resume is not None)
    family = families.get(case.solver)
    if description is not None:
        _check_description(description, case, backend, policy)
    desc = description if description is not None else family.describe(case, backend, policy)
    check_memory(desc, backend)
    caps = family.capabilities
    if ckpt is not None and "resume" not in caps:
        raise CaseError.invalid("--resume", str(resume), "a run of a solver family that checkpoints (lbm)")
    if ckpt is not None:
        _check_not_past_end(ckpt, case, desc)
    claim = (outdir.claim(out_path, overwrite=overwrite, resume=resume is not None) if out_path is not None
             else contextlib.nullcontext())
    # the signal handlers outermost, the folder's release and the thread pools' reset held like writes (a late
    # signal cannot turn an interrupted result into a bare interruption while they run)
    notice = None if ("graceful_stop" in caps or not progress) else interrupts.ABANDON_NOTICE
    with interrupts.stop_on_signals(graceful="graceful_stop" in caps, notice=notice) as stop, interrupts.exit_deferred(claim), \
            interrupts.exit_deferred(backend.run_context()):
        kwargs = {"description": desc, "progress": progress,
                  "stop": stop if "graceful_stop" in caps else None,
                  "checkpoint_dir": out_path if "checkpoint" in caps else None, "resume": ckpt}
        if "stability_rule" in caps:     # LBM: a lattice known to blow up is refused unless forced (--force)
            kwargs["force"] = force
        failed: dict = {}
        # the checkpoints prepare_resume passed over (newer than its choice) were warned about there
        said = {p for p in list_checkpoints(resume) if p.name > ckpt.path.name} if ckpt is not None else set()
        while True:
            try:
                return _run_and_write(family, case, backend, policy, kwargs, out_path, plots)
            except CheckpointError as exc:
                # damage in the chosen checkpoint's state, found as the run restored it (before its first step):
                # the next older checkpoint, as for damage that reading it shows; none left: an error naming each
                chosen = kwargs["resume"]
                if chosen is None or exc.path != chosen.path:
                    raise
                failed[chosen.path] = exc
                skipped: list = []
                kwargs["resume"] = _older_checkpoint(resume, case, backend, policy, failed, force, skipped)
                _warn_skipped(skipped, kwargs["resume"], said)


def _check_not_past_end(ckpt, case, desc) -> None:
    """A resume whose checkpoint lies beyond the run's last step (an end time shortened with --force) is refused:
    it would run nothing and report the checkpoint's steps as a completed run of fewer."""
    steps, dt = desc.parameters.get("steps"), desc.parameters.get("dt_s")
    if isinstance(steps, int) and ckpt.step > steps:
        at = f" (t = {ckpt.step * dt:.6g} s)" if isinstance(dt, float) else ""
        field, value, allowed = (("time.steps", case.time.steps, f"at least {ckpt.step}") if case.time.steps
                                 else ("time.end_time", case.time.end_time, f"at least the checkpoint's time{at}"))
        raise CaseError.invalid(field, value, allowed,
                                why=f"the checkpoint {ckpt.path.name} is at step {ckpt.step}, past this run's "
                                    f"{steps} steps; resuming would run nothing")


def _older_checkpoint(resume_dir, case, backend, policy, failed: dict, force: bool, skipped: list | None = None):
    """The newest checkpoint in ``resume_dir`` that is not in ``failed`` (path: the CheckpointError its restore
    raised) and that ``prepare_resume`` would accept for this run; ``skipped`` receives (path, why) for each
    checkpoint passed over (:func:`checkpoint.latest_checkpoint`)."""
    def usable(c):
        if c.path in failed:
            raise failed[c.path]
        _checkpoint_case(c)
        check_compatible(c, case_json=case.effective_json(), backend=backend, precision=policy.name, force=force)
        _check_same_run(resume_dir, c, force)
        return c

    return latest_checkpoint(resume_dir, use=usable, skipped=skipped)


def _run_and_write(family, case, backend, policy, kwargs, out_path, plots) -> Result:
    """The family's run, then the result folder; a partial result is written where the run stopped early.
    Once the run has returned or raised, signals only request a stop (the folder is written first)."""
    threads = backends.thread_pools()
    try:
        try:
            result = family.run(case, backend, policy, **kwargs)
        except HpcsolveError as exc:
            with interrupts.deferred():
                partial = getattr(exc, "result", None)
                if partial is not None and out_path is not None:
                    _finish(partial, case, backend, policy)
                    partial.validation = validation_verdicts(case, partial)
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
            result.provenance["cpu_threads"] = backends.cpu_threads()
            result.provenance["thread_pools"] = threads
            _finish(result, case, backend, policy)
            _judge(result, case)
            if out_path is not None:
                heartbeat.phase("writing the result (result.h5, summary.json" + (", plots)" if plots else ")"))
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


def validation_verdicts(case: CaseBase, result: Result) -> dict:
    """The verdicts on ``result``'s reference values (``Result.validation``; the family's ``verdicts``): {} for a
    family without any."""
    judge = getattr(families.get(case.solver), "verdicts", None)
    return judge(case, result.metrics, result.derived) if judge is not None else {}


def _judge(result: Result, case: CaseBase) -> None:
    """``result.validation``, the same on every rank (rank 0's), and one warning when a value is outside."""
    validation = validation_verdicts(case, result)
    comm = parallel.world()
    if parallel.ranks(comm) > 1:
        validation = comm.bcast(validation, root=0)
    result.validation = validation
    text = warning_text(case.name, validation, strict=case.run.strict_validation)
    if text:
        warnings.warn(text, stacklevel=1)


def _resume_hint(out_path: Path | None) -> str:
    newest = list_checkpoints(out_path)[-1:] if out_path is not None else []
    if not newest:
        return "nothing to resume"
    return f"resume from {newest[0].name} with: hpcsolve run --resume {out_path}"


def _finish(result: Result, case: CaseBase, backend: str, policy: Precision) -> None:
    result.provenance = {**provenance(case, backend, policy), **result.provenance}
    h = case_hash(case.effective_json())     # the case identity (as checkpoints record it; a resume compares them)
    earlier = result.provenance.get("case_lineage", [])
    result.provenance["case_hash"] = h
    result.provenance["case_lineage"] = [x for x in (earlier if isinstance(earlier, list) else []) if x != h] + [h]
    result.case_text = case.text
    result.case_json = case.effective_json()
