"""``hpcsolve bench lbm``: LBM throughput of every GPU backend x precision against the copy bandwidth.

What one run does, in order:

1. measures the device copy bandwidth (bytes read + written) in the same process: the ceiling;
2. times the NumPy CPU reference at a small size in every precision asked for (16-bit storage too, as ``run`` does on
   NumPy) and always in fp64: NumPy fp64 is the speedup column's one baseline (a row's MLUPS over NumPy fp64's at
   its size, else at the baseline size), so fp32 on NumPy shows what fp32 itself gains; with no GPU backend to
   time, at the ``--sizes`` given;
3. for each GPU backend x precision: checks every step kernel the timed sizes may run (``check_kernels``: both
   layouts under auto streaming; for 16-bit storage the pair kernel and one cell per thread) against the NumPy
   reference on a small cavity (relative L2 difference of the velocity after a few steps; fp16s and fp16c
   against fp64), each timed row showing its own kernel's check,
   then times the lid-driven cavity at each size (default 4096^2 and 8192^2): warm-up (then the timed
   run length twice, so that its step graphs are recorded untimed), CUDA
   events around a batch of steps, median of repeats;
4. reports MLUPS, effective bandwidth (bytes per cell per step from the kernel header,
   ``stepper.bytes_per_cell_step``) as % of the copy bandwidth, resident bytes per cell and the
   largest square grid that fits the device;
5. writes ``bench_lbm.json`` and ``bench_lbm.md`` to ``--out`` (or ``$OUT``, or ``results/bench/``) and
   prints the markdown table last. ``--streaming`` (default ``auto``, what a case runs: in place where the
   one-array lattice fits the L2 cache, ``gpu_common.auto_in_place``; rows streamed in place say so) writes
   ``bench_lbm_two_buffer.*`` / ``bench_lbm_in_place.*`` for ``two-buffer`` / ``in-place``.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
import sys
import time

import numpy as np

from hpcsolve.core import backends
from hpcsolve.core.errors import CaseError
from hpcsolve.core import precision as precision_mod
from hpcsolve.core.precision import get_precision
from hpcsolve.lbm import memory as lbm_memory
from hpcsolve.lbm import physics
from hpcsolve.lbm.steppers.gpu_common import bytes_per_cell
from hpcsolve.lbm.flags import VELOCITY, WALL
from hpcsolve.lbm.steppers.stepper import STREAMING, LBMSetup, get_stepper
from hpcsolve.report.bandwidth import copy_bandwidth
from hpcsolve.report.bench_inputs import check_backends, check_sizes, out_folder, write_output

DEFAULT_SIZES = (4096, 8192)
QUICK_SIZES = (512,)
#: the speed-up column's baseline precision (NumPy in it) and the reference of 16-bit storage checks
BASELINE = precision_mod.REFERENCE.name
GPU_BACKENDS = ("cupy", "numba-cuda")
CPU_SIZE = 256
CHECK_SIZE = 64
CHECK_STEPS = 50


#: smallest cavity edge: a wall, one fluid cell and the lid (n - 2 fluid cells across; at n = 2 the viscosity
#: lid_velocity * (n - 2) / reynolds is 0, i.e. tau = 0.5, which no stepper accepts)
MIN_SIZE = 3
#: largest: 131072^2 = 1.7e10 cells, over 300 GB at the fewest bytes per cell (16-bit storage): beyond any one
#: device, so a larger number is a typo rather than a benchmark
MAX_SIZE = 131072


def cavity_setup(n: int, policy, collision: str = "bgk", reynolds: float = 1000.0, lid_velocity: float = 0.1,
                 in_place: bool | None = False, ny: int | None = None):
    """Lid-driven cavity on an n x n lattice (``ny`` x n with ``ny``): resting walls left, right and bottom,
    the lid (a VELOCITY layer moving at ``lid_velocity`` in +x, lattice units) on top; n - 2 fluid cells
    across. ``in_place``: the GPU steppers stream in place (one population array); None: they choose."""
    flags = np.zeros((ny or n, n), dtype=np.uint8)
    flags[0, :] = WALL
    flags[:, 0] = WALL
    flags[:, -1] = WALL
    flags[-1, :] = VELOCITY
    uw = np.zeros((2,) + flags.shape)
    uw[0, -1, :] = lid_velocity
    tau = physics.tau_from_viscosity(lid_velocity * (n - 2) / reynolds)
    return LBMSetup(flags, tau, collision=collision, policy=policy, boundary_velocity=uw, in_place=in_place)


def _rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    den = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b) / (den if den > 0 else 1.0))


def check_kernels(precision: str, in_place: bool | None) -> list[tuple[bool, bool]]:
    """The step kernels a benchmark of ``precision`` may time, as (in place, pairs): both layouts under auto
    streaming (``in_place`` None), and with 16-bit storage on two buffers both the pair kernel (large grids) and
    one cell per thread (small grids, ``PER_CELL_CELLS``). Each is checked against the reference."""
    pairs = (False, True) if get_precision(precision, "lbm").storage_bytes == 2 else (False,)
    return [(ip, pr) for ip in ((False, True) if in_place is None else (bool(in_place),))
            for pr in (pairs if not ip else (False,))]


def check_against_reference(backend: str, precision: str, n: int = CHECK_SIZE, steps: int = CHECK_STEPS,
                            in_place: bool | None = False, pairs: bool | None = None) -> dict:
    """Velocity and density after ``steps`` steps of the cavity on ``backend`` vs the NumPy reference
    (same precision; fp16s and fp16c against fp64 NumPy). Relative L2 differences. ``pairs``: True / False forces
    the 16-bit pair kernel or one cell per thread, None the stepper's own choice (the check grid is small, so
    16-bit storage runs one cell per thread unless True)."""
    policy = get_precision(precision, "lbm")
    # a policy that stores in its compute dtype has a NumPy twin; 16-bit storage is compared with fp64
    ref_policy = policy if policy.storage == policy.compute else precision_mod.REFERENCE
    ref = get_stepper("numpy", cavity_setup(n, ref_policy))
    dev = get_stepper(backend, cavity_setup(n, policy, in_place=in_place), pairs=pairs)
    ref.step(steps)
    dev.step(steps)
    rho_r, ux_r, uy_r = ref.macroscopic()
    rho_d, ux_d, uy_d = dev.macroscopic()
    out = {"size": n, "steps": steps, "against": f"numpy-{ref_policy.name}",
           "u_rel_l2": _rel_l2(np.stack((ux_d, uy_d)), np.stack((ux_r, uy_r))),
           "rho_minus_1_rel_l2": _rel_l2(rho_d - 1.0, rho_r - 1.0)}
    out["finite"] = bool(dev.finite())
    out["in_place"] = bool(getattr(dev, "in_place", False))
    out["pairs"] = bool(getattr(dev, "pairs", False))
    return out


def time_backend(backend: str, precision: str, n: int, *, steps: int, repeats: int, warmup: int,
                 in_place: bool | None = False) -> dict:
    policy = get_precision(precision, "lbm")
    stepper = get_stepper(backend, cavity_setup(n, policy, in_place=in_place))
    stepper.perturb(1e-3, seed=n)   # the cavity starts at rest (all zeros): never time on zeros
    clock = backends.get(backend).event_clock()
    stream = getattr(stepper, "stream", None)
    stepper.step(warmup)
    for _ in range(2):   # the timed run length twice: its step graphs are recorded at the second use, untimed
        stepper.step(steps)
    backends.get(backend).synchronize()
    times = [clock.time(lambda: stepper.step(steps), stream) for _ in range(repeats)]
    seconds = statistics.median(times) / steps
    finite = bool(stepper.finite())
    cells = n * n
    mlups = cells / seconds / 1e6
    bpc = stepper.bytes_per_cell_step
    row = {"backend": backend, "precision": precision, "size": n, "cells": cells, "steps_timed": steps,
           "repeats": repeats, "seconds_per_step": seconds, "mlups": mlups,
           "seconds_spread": [min(times) / steps, max(times) / steps],
           "bytes_per_cell_step": bpc, "effective_bandwidth_GBps": mlups * 1e6 * bpc / 1e9,
           "bytes_per_cell_resident": stepper.bytes_per_cell_resident, "finite_after": finite,
           "cells_per_thread": getattr(stepper, "cells_per_thread", None), "block_x": getattr(stepper, "block_x", None),
           "in_place": bool(getattr(stepper, "in_place", False)), "pairs": bool(getattr(stepper, "pairs", False))}
    del stepper
    backends.get(backend).free_pool()
    return row


def time_numpy(precision: str, n: int, steps: int, repeats: int = 3) -> dict:
    """The NumPy reference's MLUPS (host BLAS/OpenMP threads pinned as for every run)."""
    backend = backends.get("numpy")
    policy = get_precision(precision, "lbm")
    stepper = get_stepper(backend, cavity_setup(n, policy))
    with backend.run_context():
        stepper.step(2)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            stepper.step(steps)
            times.append(time.perf_counter() - t0)
    seconds = statistics.median(times) / steps
    return {"backend": "numpy", "precision": precision, "size": n, "cells": n * n, "steps_timed": steps,
            "repeats": repeats, "seconds_per_step": seconds, "mlups": n * n / seconds / 1e6,
            "seconds_spread": [min(times) / steps, max(times) / steps], "cpu_threads": backends.cpu_threads(),
            "bytes_per_cell_step": getattr(stepper, "bytes_per_cell_step", None)}


def _host_fit(precisions, sizes) -> None:
    """A NumPy size whose stepper would not fit in this machine's free memory is a CaseError naming --sizes and
    the largest edge that fits, before anything is timed."""
    free = backends.host_memory_available()
    if free is None or not precisions:
        return
    per_cell = max(lbm_memory.lbm_numpy_step_bytes(get_precision(p, "lbm"), 1 << 20) / (1 << 20) for p in precisions)
    too_big = [n for n in sizes if n * n * per_cell > free]
    if too_big:
        largest = int(math.isqrt(int(free / per_cell)))
        raise CaseError.invalid("--sizes", too_big[0], f"grid edges up to {largest:,} for the NumPy reference here",
                                why=f"{per_cell:.0f} B per cell; {free / 1e9:.1f} GB of host memory free")


def _device_fit(gpu, precisions, sizes, in_place) -> dict:
    """{(backend, precision, n): why} for the grids whose populations do not fit the device's free memory (no
    host or device memory is touched for them); a size that fits none of the requested kernels is a CaseError
    naming --sizes and the largest that fits, before anything is timed."""
    too_big, largest = {}, {}
    for backend in gpu:
        mem = backends.get(backend).memory()
        if not mem:
            continue
        for precision in precisions:
            # auto streaming is in place only where the lattice fits the L2 cache: a large grid has two buffers
            resident = bytes_per_cell(get_precision(precision, "lbm"), bool(in_place))[1]
            largest[(backend, precision)] = _largest_square(mem[0], resident)
            for n in sizes:
                if n > largest[(backend, precision)]:
                    too_big[(backend, precision, n)] = (f"needs {n * n * resident / 2**30:,.1f} GiB of device "
                                                        f"memory, {mem[0] / 2**30:,.1f} GiB free (largest square "
                                                        f"that fits: {largest[(backend, precision)]:,})")
    for n in sizes:
        if largest and all((b, p, n) in too_big for b, p in largest):
            raise CaseError.invalid("--sizes", n, f"grid edges up to {max(largest.values()):,} on this device",
                                    why=f"no requested backend and precision fits {n:,}^2 cells in the device's "
                                        f"free memory")
    return too_big


def _largest_square(free_bytes: int, bytes_per_cell: float) -> int:
    n = int(math.sqrt(free_bytes * 0.95 / bytes_per_cell))
    return n - n % 32


def _mlups_range(row: dict, fmt: str = ",.0f") -> str:
    lo, hi = row.get("seconds_spread", [row["seconds_per_step"]] * 2)
    return f"{row['cells'] / hi / 1e6:{fmt}}-{row['cells'] / lo / 1e6:{fmt}}"


def _bound(precision: str) -> float:
    """The relative L2 velocity difference a kernel check of ``precision`` accepts: the policy's ``check_bound``."""
    return get_precision(precision, "lbm").check_bound


def _check_key(backend: str, precision: str, in_place: bool = False, pairs: bool = False) -> str:
    """The key of a check in ``checks``: backend/precision and the step kernel (:func:`check_kernels`)."""
    return f"{backend}/{precision} ({'in place' if in_place else 'two buffers'}{', pairs' if pairs else ''})"


def _markdown(data: dict) -> str:
    bw = data["copy_bandwidth_GBps"]
    lines = [f"LBM D2Q9 lid-driven cavity, {data['device']}; copy bandwidth {bw:,.0f} GB/s "
             f"(read + write, same run). Bytes per cell per step from each kernel's header.", "",
             "MLUPS: median of the timed repeats (min-max).", "",
             "| backend | precision | grid | MLUPS (min-max) | GB/s | % of copy | B/cell/step | speedup vs NumPy fp64 | check vs ref |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in data["rows"]:
        if "error" in r or "skipped" in r:
            label = r["backend"] + (" (in place)" if r.get("in_place") else "")
            what = f"failed: {r['error'][:80]}" if "error" in r else f"not timed: {r['skipped'][:100]}"
            lines.append(f"| {label} | {r['precision']} | {r.get('size', '')}^2 | {what} | | | | | |")
            continue
        speed = _speedup_text(r.get("speedup_vs_numpy_fp64"))
        chk = data["checks"].get(_check_key(r["backend"], r["precision"], r.get("in_place", False),
                                            r.get("pairs", False)), {})
        chk_s = f"u {chk['u_rel_l2']:.1e} ({chk['against']})" if "u_rel_l2" in chk else chk.get("error", "")[:60]
        pct = 100.0 * r["effective_bandwidth_GBps"] / bw if bw else float("nan")
        label = r["backend"] + (" (in place)" if r.get("in_place") else "")
        lines.append(f"| {label} | {r['precision']} | {r['size']}^2 | {r['mlups']:,.0f} ({_mlups_range(r)}) | "
                     f"{r['effective_bandwidth_GBps']:,.0f} | {pct:.0f}% | {r['bytes_per_cell_step']:g} | {speed} | {chk_s} |")
    for r in data["cpu_reference"]:
        lines.append(f"| numpy (CPU, {r.get('cpu_threads', 1)} thread) | {r['precision']} | {r['size']}^2 | "
                     f"{r['mlups']:,.2f} ({_mlups_range(r, '.2f')}) | | | | "
                     f"{_speedup_text(r.get('speedup_vs_numpy_fp64'))} | "
                     f"{'baseline' if r['precision'] == BASELINE else 'not checked (CPU reference)'} |")
    base = data.get("speedup_baseline")
    if base and base not in data["cpu_reference"]:
        lines.append(f"| numpy (CPU, {base.get('cpu_threads', 1)} thread) | {BASELINE} | {base['size']}^2 | "
                     f"{base['mlups']:,.2f} ({_mlups_range(base, '.2f')}) | | | | 1.00x | baseline of the speed-ups |")
    if data.get("memory"):
        lines += ["", "| backend | precision | resident B/cell | largest square grid that fits |",
                  "| --- | --- | ---: | ---: |"]
        for m in data["memory"]:
            lines.append(f"| {m['backend']} | {m['precision']} | {m['bytes_per_cell_resident']:g} | "
                         f"{m['largest_square']:,}^2 ({m['largest_square']**2 / 1e9:.2f} G cells) |")
    return "\n".join(lines) + "\n"


def speedups(rows: list, cpu_rows: list, baseline: dict | None = None) -> None:
    """Each row's ``speedup_vs_numpy_fp64``: its MLUPS over the NumPy fp64 reference's at the same grid, else at the
    baseline size (the first fp64 row, or ``baseline`` where fp64 was not asked for; a GPU row at 4096^2 against
    NumPy at 256^2). One baseline for every precision: NumPy fp32 against NumPy fp64 says what fp32 gains (each
    precision against itself said 1x)."""
    base = [r for r in cpu_rows if r["precision"] == BASELINE and "mlups" in r] + ([baseline] if baseline else [])
    if not base:
        return
    for r in rows + cpu_rows + ([baseline] if baseline else []):
        if "mlups" in r:
            ref = next((b for b in base if b["size"] == r.get("size")), base[0])
            r["speedup_vs_numpy_fp64"] = r["mlups"] / ref["mlups"]
            r["speedup_baseline"] = f"numpy/fp64 {ref['size']}^2"


def _speedup_text(x) -> str:
    if x is None:
        return ""
    return f"{x:,.0f}x" if x >= 10 else f"{x:.2f}x"


def _bench_one(backend: str, precision: str, sizes, in_place, fits: dict, bw: dict, timing: dict, checks: dict,
               rows: list, memory: list) -> None:
    """One GPU backend x precision: its step kernels checked against the reference (into ``checks``), each size
    timed (``rows``; ``timing``: steps, repeats, warmup of ``time_backend``) and the largest grid (``memory``)."""
    key = f"{backend}/{precision}"
    # every kernel a timed size may run is checked (auto streaming: both layouts; 16-bit: the pair kernel
    # and one cell per thread); each row shows the check of its own kernel (row keys: _check_key)
    for layout, pr in check_kernels(precision, in_place):
        k = _check_key(backend, precision, layout, pr)
        try:
            chk = check_against_reference(backend, precision, in_place=layout, pairs=pr)
            chk["bound"] = _bound(precision)
            chk["passed"] = bool(chk["finite"] and chk["u_rel_l2"] <= chk["bound"])
        except Exception as exc:  # report, don't hide: the row says why
            chk = {"error": f"{type(exc).__name__}: {exc}", "passed": False}
        checks[k] = chk
        print(f"check {k}: {chk}", file=sys.stderr)
        if not chk["passed"]:
            break
    if not chk["passed"]:
        rows.append({"backend": backend, "precision": precision, "size": "", "in_place": in_place,
                     "error": "not timed: check against the reference failed " + chk.get("error", "")})
        return
    for n in sizes:
        if fits.get((backend, precision, n)):     # does not fit this device: said, not tried
            rows.append({"backend": backend, "precision": precision, "size": n, "in_place": in_place,
                         "skipped": fits[(backend, precision, n)]})
            print(f"time {key} {n}^2: not timed, {fits[(backend, precision, n)]}", file=sys.stderr)
            continue
        try:
            row = time_backend(backend, precision, n, **timing, in_place=in_place)
            row["percent_of_copy"] = 100.0 * row["effective_bandwidth_GBps"] / bw["bandwidth_GBps"]
        except Exception as exc:
            row = {"backend": backend, "precision": precision, "size": n, "in_place": in_place,
                   "error": f"{type(exc).__name__}: {exc}"}
            backends.get(backend).free_pool()
        rows.append(row)
        print(f"time {key} {n}^2: {row.get('mlups', row.get('error'))}", file=sys.stderr)
    last = next((r for r in reversed(rows) if r["backend"] == backend and r["precision"] == precision
                 and "bytes_per_cell_resident" in r), None)
    mem = backends.get(backend).memory()
    if last and mem:
        # the largest grid under auto streaming is a two-buffer one (auto streams in place only where the
        # lattice fits the L2 cache), whatever the last timed size did
        resident = (bytes_per_cell(get_precision(precision, "lbm"), False)[1] if in_place is None
                    else last["bytes_per_cell_resident"])
        memory.append({"backend": backend + (" (in place)" if in_place else ""), "precision": precision,
                       "bytes_per_cell_resident": resident,
                       "device_free_bytes": mem[0], "device_total_bytes": mem[1],
                       "largest_square": _largest_square(mem[0], resident)})


def main(args) -> int:
    quick = bool(getattr(args, "quick", False))
    # every option is checked before anything is created or timed (CaseError: exit 2 naming the option)
    sizes = check_sizes(getattr(args, "sizes", None) or (QUICK_SIZES if quick else DEFAULT_SIZES), "--sizes",
                        MIN_SIZE, MAX_SIZE, f"grid edges in [{MIN_SIZE}, {MAX_SIZE}] cells",
                        why_low=f"the cavity needs a wall, a fluid cell and the lid across ({MIN_SIZE} cells at least)")
    precisions = tuple(get_precision(p, "lbm", field="--precisions").name
                       for p in (getattr(args, "precisions", None) or precision_mod.names("lbm")))
    wanted = check_backends(getattr(args, "backends", None) or GPU_BACKENDS)
    gpu = [b for b in wanted if b in GPU_BACKENDS and backends.probe(b).available and not backends.probe(b).simulator]
    skipped = {b: backends.probe(b).reason for b in wanted if b in GPU_BACKENDS and b not in gpu}
    streaming = getattr(args, "streaming", None) or "auto"
    in_place = STREAMING[streaming]   # None: each stepper chooses
    fits = _device_fit(gpu, precisions, sizes, in_place)   # sizes no requested kernel can hold: exit 2 now
    # the NumPy reference: the speedup column's baseline size; without a GPU backend to time, the sizes asked for
    cpu_sizes = list(dict.fromkeys(sizes)) if not gpu and getattr(args, "sizes", None) else [64 if quick else CPU_SIZE]
    # NumPy runs every LBM precision (16-bit storage decoded to its compute type, as ``run`` does); NumPy fp64 is the
    # speedup column's baseline, timed apart where fp64 is not asked for
    cpu_precisions = list(precisions)
    _host_fit(list(dict.fromkeys([BASELINE] + cpu_precisions)), cpu_sizes)   # the speed-up baseline
    out = out_folder(args)
    steps = 20 if quick else 100
    repeats = 3 if quick else 7
    warmup = 5 if quick else 20

    bw_backend = gpu[0] if gpu else "numpy"
    bw = copy_bandwidth(bw_backend, nbytes=(256 if quick else 2048) * 1024**2, repeats=5 if quick else 10)
    device = backends.get(bw_backend).device_name if gpu else platform.processor() or "CPU"
    print(f"copy bandwidth ({bw_backend}): {bw['bandwidth_GBps']:,.0f} GB/s", file=sys.stderr)

    cpu_rows = [time_numpy(p, n, steps=5 if quick else 20) for n in cpu_sizes for p in cpu_precisions]

    checks, rows, memory = {}, [], []
    for backend in gpu:
        for precision in precisions:
            _bench_one(backend, precision, sizes, in_place, fits, bw, dict(steps=steps, repeats=repeats, warmup=warmup),
                       checks, rows, memory)
    baseline = None if BASELINE in cpu_precisions else time_numpy(BASELINE, cpu_sizes[0], steps=5 if quick else 20)
    speedups(rows, cpu_rows, baseline)

    data = {"benchmark": "lbm", "case": "lid-driven cavity (D2Q9, BGK)", "device": device, "quick": quick,
            "in_place": in_place, "streaming": streaming,
            "copy_bandwidth_GBps": bw["bandwidth_GBps"], "copy_bandwidth": bw,
            "sizes": sorted({r["size"] for r in rows + cpu_rows if "mlups" in r}), "sizes_requested": list(sizes),
            "precisions": list(precisions), "backends_timed": gpu, "backends_skipped": skipped,
            "checks": checks, "rows": rows, "cpu_reference": cpu_rows, "memory": memory,
            "speedup_baseline": baseline or next((r for r in cpu_rows if r["precision"] == BASELINE), None),
            "packages": backends.package_versions()}
    stem = {"auto": "bench_lbm", "in-place": "bench_lbm_in_place", "two-buffer": "bench_lbm_two_buffer"}[streaming]
    write_output(out / f"{stem}.json", json.dumps(data, indent=2, default=str))
    md = _markdown(data)
    if skipped:
        md += "\n" + "\n".join(f"- {b} not timed: {why}" for b, why in skipped.items()) + "\n"
    write_output(out / f"{stem}.md", md)
    print(md)
    failed = [k for k, c in checks.items() if not c.get("passed")]
    return 1 if failed or any("error" in r for r in rows) else 0
