"""The LBM side of checkpoints: the run's full state as a ``Checkpoint`` (``make_checkpoint``) and back into a
stepper, monitor and result (``restore``), every field checked (``hpcsolve.core.checkpoint`` reads and writes the
files)."""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.core.checkpoint import MISSING, Checkpoint, CheckpointError, as_number, case_hash, case_lineage
from hpcsolve.core.errors import CaseError
from hpcsolve.core.precision import Precision, get_precision
from hpcsolve.core.results import Snapshot


def make_checkpoint(case, backend, policy, stepper, monitor, result, step, mass0, step_seconds,
                    total_seconds) -> Checkpoint:
    """The full state at ``step``: populations, monitor series, steady-state tracking, snapshots."""
    arrays = {"populations": stepper.populations()}
    if monitor.last_steady_u is not None:
        arrays["steady_last_u"] = monitor.last_steady_u
    snaps = []
    for i, snap in enumerate(result.snapshots):
        for name, a in snap.fields.items():
            arrays[f"snapshot_{i:06d}_{name}"] = a
        snaps.append({"time": snap.time, "step": snap.step, "fields": list(snap.fields)})
    state = {"series": monitor.series, "mass0": mass0, "step_seconds": step_seconds, "snapshots": snaps,
             "total_seconds": total_seconds,
             "last_steady_step": monitor.last_steady_step, "steady_change": monitor.steady_change,
             "steady_checks": [[int(k), float(c)] for k, c in monitor.steady_checks],
             "steady_growth": [[int(k), float(g)] for k, g in sorted(monitor.steady_growth.items())],
             "steady_peek": None if monitor.steady_peek is None else [int(monitor.steady_peek[0]),
                                                                      int(monitor.steady_peek[1]),
                                                                      float(monitor.steady_peek[2])],
             "steady_peek_step": monitor.steady_peek_step}
    case_json = case.effective_json()
    meta = {"backend": str(backend), "precision": policy.name, "case_text": case.text,
            "case_json": case_json, "overrides": list(case.overrides), "solver": "lbm",
            "case_file": str(case.path) if case.path else "", **identity(case.name, case_json, result)}
    return Checkpoint(step=step, arrays=arrays, state=state, meta=meta)


def identity(name: str, case_json: str, result) -> dict:
    """The case identity a checkpoint records: the case's name, its hash (``core.checkpoint.case_hash``) and the
    lineage, the hashes of the run so far (a run resumed with --force into another case keeps the earlier ones: the
    restored checkpoint's lineage is in ``result.provenance["case_lineage"]``)."""
    h = case_hash(case_json)
    earlier = result.provenance.get("case_lineage", []) if isinstance(result.provenance, dict) else []
    return {"case_name": name, "case_hash": h, "case_lineage": [x for x in earlier if x != h] + [h]}


def restore(ckpt: Checkpoint, stepper, monitor, result) -> tuple[int, float, float, float]:
    """Put the state of ``ckpt`` into the stepper, the monitor and the result. Every field is checked first: a
    missing or malformed one (or populations that do not fit this run) is a CheckpointError naming the
    checkpoint and the field."""
    series = _restored_series(ckpt, list(monitor.series))
    steady_u = ckpt.arrays.get("steady_last_u")
    n_fluid = int(np.count_nonzero(monitor.fluid))
    if steady_u is not None and (np.shape(steady_u) != (2, n_fluid) or not np.issubdtype(steady_u.dtype, np.floating)):
        raise ckpt.error("arrays/steady_last_u", f"{steady_u.dtype} {np.shape(steady_u)}",
                         f"floating-point numbers of shape (2, {n_fluid})")
    last_steady_step = ckpt.whole("state.last_steady_step", maximum=ckpt.step)
    steady_change = ckpt.number("state.steady_change", finite=False)
    steady_checks = _restored_steady_checks(ckpt)
    steady_growth = dict(_restored_pairs(ckpt, "steady_growth", "[check step, growth exponent]", finite=False))
    peek = _restored_peek(ckpt)
    peek_step = ckpt.state.get("steady_peek_step")
    if peek_step is not None:
        peek_step = ckpt.whole("state.steady_peek_step", maximum=ckpt.step)
    mass0 = ckpt.number("state.mass0")
    if not mass0 > 0:
        raise ckpt.error("state.mass0", ckpt.state["mass0"], "a finite number > 0 (the initial fluid mass)")
    step_seconds = ckpt.number("state.step_seconds", minimum=0)
    total_seconds = ckpt.number("state.total_seconds", default=step_seconds, minimum=0)
    snapshots = _restored_snapshots(ckpt, tuple(monitor.geo.shape))
    populations = restored_populations(ckpt, stepper.policy)
    try:
        stepper.load_populations(populations, ckpt.step)
    except CheckpointError:
        raise
    except CaseError as exc:          # another shape or dtype than this run's
        raise ckpt.error("arrays/populations", exc.value, exc.allowed, why="they do not fit this run") from None
    monitor.series = series
    monitor.last_steady_u = steady_u
    monitor.last_steady_step = last_steady_step
    monitor.steady_change = steady_change
    monitor.steady_checks = steady_checks
    monitor.steady_growth = steady_growth
    monitor.steady_peek = peek
    monitor.steady_peek_step = peek_step
    result.snapshots.extend(snapshots)
    if case_lineage(ckpt.meta):
        result.provenance["case_lineage"] = case_lineage(ckpt.meta)   # the run's identity so far (see identity)
    return ckpt.step, mass0, step_seconds, total_seconds


def restored_populations(ckpt: Checkpoint, policy: Precision) -> np.ndarray:
    """``arrays/populations`` in this run's storage: finite (a checkpoint is written only after the state check,
    so NaN or Inf there is damage), and where the checkpoint's precision differs (``--force``) decoded with its
    policy and encoded with the run's (round to nearest)."""
    populations = ckpt.arrays.get("populations")
    if populations is None:
        raise ckpt.error("arrays/populations", allowed="the run's populations, shape (9, ny, nx)")
    saved = ckpt.meta.get("precision", MISSING)
    if saved is MISSING:
        raise ckpt.error("meta.precision", allowed="the precision the checkpoint's populations are stored in")
    try:
        old = get_precision(saved, "lbm", field="meta.precision") if saved != policy.name else policy
    except CaseError as exc:
        raise ckpt.error("meta.precision", saved, exc.allowed) from None
    if populations.dtype != np.dtype(old.storage):
        raise ckpt.error("arrays/populations", f"{populations.dtype} {populations.shape}",
                         f"{np.dtype(old.storage)} (the storage of meta.precision {old.name!r})")
    if not old.all_finite(populations):
        raise ckpt.error("arrays/populations", "NaN or Inf values", "finite populations",
                         why="the file is damaged (a run writes a checkpoint only after its state check passed)")
    if old is not policy:
        populations = policy.encode(old.decode(populations).astype(policy.compute))
    return populations


def _restored_steady_checks(ckpt: Checkpoint) -> list[tuple[int, float]]:
    """``state.steady_checks``: [step, change] of each steady check (the stall test's history); a checkpoint from
    before it was kept has none (the stall test then starts afresh)."""
    checks = ckpt.state.get("steady_checks", [])
    allowed = "a list of [step, change] pairs (step a whole number up to the checkpoint's, change a number)"
    if not isinstance(checks, list):
        raise ckpt.error("state.steady_checks", checks, allowed)
    out = []
    for pair in checks:
        ok = isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int and 0 <= pair[0] <= ckpt.step
        change = as_number(pair[1]) if ok else None
        if change is None:
            raise ckpt.error("state.steady_checks", pair, allowed)
        out.append((pair[0], change))
    return out


def _restored_peek(ckpt: Checkpoint):
    """``state.steady_peek``: [reference step, step, change] of the last peek, or null (none, or a checkpoint from
    before the stall test kept it)."""
    value = ckpt.state.get("steady_peek")
    if value is None:
        return None
    allowed = "null or [reference step, peek step, change] (whole steps up to the checkpoint's, then a number)"
    ok = (isinstance(value, list) and len(value) == 3 and all(type(k) is int and 0 <= k <= ckpt.step for k in value[:2])
          and value[0] < value[1])
    change = as_number(value[2]) if ok else None
    if change is None:
        raise ckpt.error("state.steady_peek", value, allowed)
    return value[0], value[1], change


def _restored_pairs(ckpt: Checkpoint, key: str, what: str, *, finite: bool = True, single: bool = False):
    """``state.<key>``: a list of [step, number] pairs (``single``: one pair or null); a checkpoint from before the
    stall test's growth was kept has none. Steps are whole numbers up to the checkpoint's."""
    value = ckpt.state.get(key)
    if value is None:
        return []
    allowed = (f"{'null or one' if single else 'a list of'} {what} pair{'' if single else 's'} (step a whole number "
               f"up to the checkpoint's, then a number)")
    pairs = [value] if single else value
    if not isinstance(pairs, list) or (single and not isinstance(value, list)):
        raise ckpt.error(f"state.{key}", value, allowed)
    out = []
    for pair in pairs:
        ok = isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int and 0 <= pair[0] <= ckpt.step
        number = as_number(pair[1]) if ok else None
        if number is None or (finite and not math.isfinite(number)):
            raise ckpt.error(f"state.{key}", pair, allowed)
        out.append((pair[0], number))
    return out


def _restored_series(ckpt: Checkpoint, keys: list[str]) -> dict[str, list[float]]:
    """``state.series``: a list of numbers (one per monitor step) for each of this run's series."""
    series = ckpt.state.get("series", MISSING)
    allowed = "an object with a list of numbers for each of " + ", ".join(keys)
    if series is MISSING:
        raise ckpt.error("state.series", allowed=allowed)
    if not isinstance(series, dict):
        raise ckpt.error("state.series", series, allowed)
    if set(series) != set(keys):
        raise ckpt.error("state.series", sorted(series), allowed, why="other series than this run's")
    out, length = {}, len(series[keys[0]]) if isinstance(series[keys[0]], list) else None
    for k, values in series.items():
        numbers = [as_number(v) for v in values] if isinstance(values, list) else None
        if numbers is None or None in numbers or len(numbers) != length:
            raise ckpt.error(f"state.series.{k}", values, f"a list of numbers, as long as state.series.{keys[0]}")
        out[k] = numbers
    return out


def _restored_snapshots(ckpt: Checkpoint, shape: tuple[int, int]) -> list[Snapshot]:
    """``state.snapshots`` with their fields from ``arrays/snapshot_<i>_<name>``."""
    snaps = ckpt.state.get("snapshots", MISSING)
    allowed = "a list of {time, step, fields} objects"
    if snaps is MISSING or not isinstance(snaps, list):
        raise ckpt.error("state.snapshots", snaps, allowed)
    out = []
    for i, snap in enumerate(snaps):
        where = f"state.snapshots[{i}]"
        names = snap.get("fields") if isinstance(snap, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ckpt.error(where, snap, allowed)
        time = as_number(snap.get("time"))
        if time is None or not math.isfinite(time):
            raise ckpt.error(f"{where}.time", snap.get("time", MISSING), "a finite number")
        step = snap.get("step", MISSING)
        if type(step) is not int or not 0 <= step <= ckpt.step:
            raise ckpt.error(f"{where}.step", step, f"a whole number from 0 to {ckpt.step}")
        fields = {}
        for name in names:
            key = f"snapshot_{i:06d}_{name}"
            a = ckpt.arrays.get(key)
            if a is None or np.shape(a)[:2] != shape or not np.issubdtype(a.dtype, np.number):
                raise ckpt.error(f"arrays/{key}", MISSING if a is None else f"{a.dtype} {np.shape(a)}",
                                 f"numbers of shape {shape} (+ components)")
            fields[name] = a
        out.append(Snapshot(time=time, step=step, fields=fields))
    return out