"""P1 tetrahedral stiffness on a box of nx^3 hexahedra (6 Kuhn tetrahedra each): the existing path against the
two-phase one, on one backend, with the copy bandwidth measured in the same process.

* existing: ``fe_assembly.stiffness_local`` (element matrices (m, 4, 4)), ``device.coo_sum`` (sort of the 16 m
  keys, duplicates summed), ``device.csr``;
* two-phase: ``tet_assembly.pattern`` (symbolic, once per mesh) and ``tet_assembly.stiffness_values`` (numeric:
  one kernel on CuPy, straight into the CSR data), timed apart.

Each is run ``--warmup`` times, then timed ``--repeats`` times with the device synchronized before and after every
call (median, min, max). The numeric phase's GB/s is ``tet_assembly.bytes_moved`` (the DRAM bytes it must move at
least: inputs once, the CSR data read and written once; the atomics' L2 traffic and the zeroing are not counted)
over its median time, and its share of the copy bandwidth (read + write, ``hpcsolve.report.bandwidth``). The
two-phase result is checked against the existing one: the same pattern, values to round-off (max rel. diff, over
the largest entry).

    python scripts/fem_assembly_bench.py --backend cupy [--sizes 64 96 128] [--repeats 10] [--out DIR]
    python scripts/fem_assembly_bench.py --backend numpy --sizes 8 16
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from hpcsolve.core import backends
from hpcsolve.fem.discrete import device, fe_assembly, simplex_problem, tet_assembly
from hpcsolve.fem.discrete.elements import element
from hpcsolve.fem.discrete.simplex_gen import box, dofmap
from hpcsolve.report.bandwidth import copy_bandwidth

#: default box sizes on a GPU backend and on the host
GPU_SIZES, HOST_SIZES = (64, 96, 128), (8, 16)


def timed(fn, xp, warmup: int, repeats: int):
    """(the last call's result, {median_s, min_s, max_s, repeats}) of ``fn()``, synchronized around each call."""
    out = None
    for _ in range(warmup):
        out = None
        out = fn()
    times = []
    for _ in range(repeats):
        out = None                                     # the previous result freed before the next call
        device.synchronize(xp)
        t0 = time.perf_counter()
        out = fn()
        device.synchronize(xp)
        times.append(time.perf_counter() - t0)
    return out, {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                 "repeats": len(times)}


def bench_size(size: int, backend, args, copy_gbps: float) -> dict:
    """One box: both paths timed, the results compared, the numeric phase's bytes and bandwidth."""
    xp = backend.xp
    host = box(size, size, size)
    el = element(3, 1)
    fm = simplex_problem.upload(simplex_problem.FEMesh(host, el, dofmap(host, 1)), xp)
    mesh, dm = fm.mesh, fm.dofmap
    n, m = host.n_points, host.n_cells
    coef = xp.asarray(np.linspace(1.0, 2.0, m)) if args.per_cell else 1.0

    def existing():
        dofs, local = fe_assembly.stiffness_local(mesh, dm, el, coef)
        rows, cols, vals = device.coo_sum(dofs, local, n)
        return device.csr(rows, cols, vals, n)

    ref, t_old = timed(existing, xp, args.warmup, args.repeats)
    pat, t_pat = timed(lambda: tet_assembly.pattern(mesh.cells, n, xp), xp, args.warmup, args.repeats)
    data, t_num = timed(lambda: tet_assembly.stiffness_values(mesh.points, mesh.cells, pat.positions, pat.nnz, coef),
                        xp, args.warmup, args.repeats)
    same = (ref[1].shape == pat.indices.shape and bool(xp.array_equal(ref[0], pat.indptr.astype(ref[0].dtype)))
            and bool(xp.array_equal(ref[1], pat.indices)))
    diff = float(xp.abs(data - ref[2]).max() / xp.abs(ref[2]).max()) if same else float("nan")
    nbytes = tet_assembly.bytes_moved(n, m, pat.nnz, pat.positions.dtype.itemsize, args.per_cell)
    gbps = nbytes / t_num["median_s"] / 1e9
    row = {"size": size, "cells": m, "nodes": n, "nnz": pat.nnz, "existing": t_old, "pattern": t_pat,
           "numeric": t_num, "speedup": t_old["median_s"] / t_num["median_s"],
           "speedup_with_pattern": t_old["median_s"] / (t_pat["median_s"] + t_num["median_s"]), "bytes_moved": nbytes,
           "numeric_GBps": gbps, "numeric_GBps_best": nbytes / t_num["min_s"] / 1e9,
           "percent_of_copy": 100.0 * gbps / copy_gbps, "atomics_per_s": 16 * m / t_num["median_s"],
           "same_pattern": same, "max_rel_diff": diff}
    del ref, pat, data, fm, mesh, dm
    backend.free_pool()
    return row


def _ms(t: dict) -> str:
    return f"{t['median_s'] * 1e3:.3f} ({t['min_s'] * 1e3:.3f}-{t['max_s'] * 1e3:.3f})"


def table(result: dict) -> str:
    """The markdown report: the run's set-up, then one row per box."""
    bw = result["copy_bandwidth"]
    lines = [f"# P1 tetrahedral assembly: existing path against pattern + numeric phase ({result['backend']})", "",
             f"- device: {result['device']}",
             f"- copy bandwidth (read + write, median of {bw['repeats']}): {bw['bandwidth_GBps']:.1f} GB/s",
             f"- coefficient: {'one value per cell' if result['per_cell'] else 'one number'}; "
             f"{result['warmup']} warm-up call(s), then {result['repeats']} timed; times in ms: median (min-max)",
             "- numeric MB: tet_assembly.bytes_moved (cells, points, positions read once; CSR data read and written "
             "once; atomics' L2 traffic and the zeroing not counted); G adds/s: the 16 contributions per "
             "tetrahedron (atomicAdd on CuPy) per second", "",
             "- speed-up: the existing path's time over the numeric phase's (a matrix assembled again on the same "
             "mesh); with pattern: over pattern + numeric (a case run's one assembly pays both)", "",
             "| box | tetrahedra | nodes | nnz | existing ms | pattern ms | numeric ms | speed-up | with pattern | "
             "numeric MB | GB/s | % of copy | G adds/s | same pattern | max rel. diff |",
             "| --- " * 15 + "|"]
    for r in result["rows"]:
        lines.append(f"| {r['size']}^3 | {r['cells']:,} | {r['nodes']:,} | {r['nnz']:,} | {_ms(r['existing'])} | "
                     f"{_ms(r['pattern'])} | {_ms(r['numeric'])} | {r['speedup']:.1f}x | {r['speedup_with_pattern']:.1f}x | "
                     f"{r['bytes_moved'] / 1e6:.1f} "
                     f"| {r['numeric_GBps']:.1f} | {r['percent_of_copy']:.1f} | {r['atomics_per_s'] / 1e9:.2f} | "
                     f"{'yes' if r['same_pattern'] else 'NO'} | {r['max_rel_diff']:.1e} |")
    return "\n".join(lines) + "\n"


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cupy", help="numpy or cupy (default cupy)")
    ap.add_argument("--sizes", type=int, nargs="+",
                    help=f"cells per box edge (default {' '.join(map(str, GPU_SIZES))} on a GPU, "
                         f"{' '.join(map(str, HOST_SIZES))} on the host)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--per-cell", action="store_true", help="a coefficient per cell (default: one number)")
    ap.add_argument("--copy-mib", type=int, default=2048, help="MiB copied for the copy bandwidth (default 2048)")
    ap.add_argument("--out", type=Path, help="write DIR/fem_assembly_bench.md and .json")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    backend = backends.get(args.backend).require()
    sizes = args.sizes or (GPU_SIZES if backend.gpu else HOST_SIZES)
    bw = copy_bandwidth(backend.name, nbytes=args.copy_mib * 1024**2, repeats=10)
    rows = [bench_size(s, backend, args, bw["bandwidth_GBps"]) for s in sizes]
    result = {"backend": backend.name, "device": backend.device_name, "copy_bandwidth": bw,
              "per_cell": args.per_cell, "warmup": args.warmup, "repeats": args.repeats, "rows": rows,
              "bytes_model": tet_assembly.bytes_moved.__doc__}
    text = table(result)
    print(text, end="")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fem_assembly_bench.md").write_text(text)
        (args.out / "fem_assembly_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
