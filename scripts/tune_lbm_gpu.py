#!/usr/bin/env python3
"""Choose the launch shape of the GPU LBM step kernels: cells per thread x threads per block.

For each backend x precision x shape: check the result against the NumPy reference on a
channel with every boundary type (relative L2 of the shifted populations), then time the
lid-driven cavity at --size^2 (CUDA events, median of repeats) and print MLUPS and % of the copy
bandwidth. The defaults in kernels_cupy.LAUNCH / kernels_numba.LAUNCH come from this table.

    python3 scripts/tune_lbm_gpu.py [--size 8192] [--backends cupy numba-cuda]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "lbm"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--backends", nargs="+", default=["cupy", "numba-cuda"])
    ap.add_argument("--precisions", nargs="+", default=["fp64", "fp32", "fp16s", "fp16c"])
    ap.add_argument("--cpt", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--block", type=int, nargs="+", default=[128, 256])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--max-registers", type=int, default=None, help="cap the step kernel's registers")
    ap.add_argument("--variant", action="append", default=[], metavar="BACKEND:KEY=VAL,...",
                    help="explicit stepper options instead of the cpt x block grid, e.g. "
                         "'cupy:pairs=1,block_x=128' or 'numba-cuda:pairs=1,exchange=smem,max_registers=40'")
    args = ap.parse_args(argv)
    out = Path(os.environ.get("OUT", "."))

    from lbm_gpu_cases import channel, rel_diff, shifted  # late: after sys.path holds tests/lbm

    from hpcsolve.lbm.steppers.kernels_cupy import CupyStepper  # late: imports cupy (optional GPU module)
    from hpcsolve.lbm.steppers.kernels_numba import NumbaCudaStepper  # late: imports numba.cuda (optional GPU module)
    from hpcsolve.lbm.steppers.stepper import get_stepper  # late: after sys.path holds the source tree
    from hpcsolve.core.precision import get_precision  # late: after sys.path holds the source tree
    from hpcsolve.report.bandwidth import copy_bandwidth  # late: after sys.path holds the source tree
    from hpcsolve.core import backends  # late: after sys.path holds the source tree
    from hpcsolve.report.bench_lbm import cavity_setup  # late: after sys.path holds the source tree

    cls = {"cupy": CupyStepper, "numba-cuda": NumbaCudaStepper}
    bw = copy_bandwidth("cupy")["bandwidth_GBps"]
    rows = []
    for prec in args.precisions:
        pol = get_precision(prec, "lbm")
        check = channel(nx=518, ny=131, collision="trt", policy=pol)   # even nx: the 16-bit pair kernel can run
        ref = get_stepper("numpy", check)
        ref.step(30)
        h_ref = shifted(ref)
        variants = []
        for v in args.variant:
            backend, _, rest = v.partition(":")
            kw = {}
            for item in filter(None, rest.split(",")):
                k, _, val = item.partition("=")
                try:
                    kw[k] = val if k == "exchange" else int(val)
                except ValueError:
                    ap.error(f"--variant {v!r}: {k} must be an integer, got {val!r}")
            if backend not in cls:
                ap.error(f"--variant {v!r}: backend must be one of {', '.join(cls)}")
            variants.append((backend, kw))
        if not variants:
            for backend in args.backends:
                for cpt in args.cpt:
                    for bx in args.block:
                        kw = {"cells_per_thread": cpt, "block_x": bx}
                        if args.max_registers:
                            kw["max_registers"] = args.max_registers
                        variants.append((backend, kw))
        for backend, kw in variants:
            try:
                st = cls[backend](cavity_setup(args.size, pol), **kw)
                # the check runs the kernel the timed grid runs (16-bit: pair kernel or one cell per thread)
                dev = cls[backend](check, **{**kw, "pairs": st.pairs})
                if dev.pairs != st.pairs:
                    raise RuntimeError(f"the check grid cannot run the timed kernel (pairs={st.pairs})")
                dev.step(30)
                err = rel_diff(shifted(dev), h_ref)
                del dev
                st.perturb(1e-3, seed=1)
                st.step(10)
                clock = backends.get(backend).event_clock()
                times = [clock.time(lambda: st.step(args.steps), getattr(st, "stream", None)) for _ in range(5)]
                sec = statistics.median(times) / args.steps
                mlups = args.size**2 / sec / 1e6
                pct = 100 * mlups * 1e6 * st.bytes_per_cell_step / 1e9 / bw
                row = dict(backend=backend, precision=prec, options=kw, pairs=getattr(st, "pairs", False),
                           cpt=st.cells_per_thread, block=st.block_x, err=err, mlups=mlups, pct=pct, finite=st.finite())
                del st
            except Exception as exc:
                row = dict(backend=backend, precision=prec, options=kw, error=f"{type(exc).__name__}: {exc}"[:300])
            backends.get(backend).free_pool()
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    (out / "tune_lbm_gpu.json").write_text(json.dumps({"copy_GBps": bw, "rows": rows}, indent=2))
    print(f"copy bandwidth {bw:,.0f} GB/s; cavity {args.size}^2")
    print("| backend | precision | options | MLUPS | % copy | rel err vs numpy |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for r in rows:
        opts = ", ".join(f"{k}={v}" for k, v in r["options"].items())
        if "error" in r:
            print(f"| {r['backend']} | {r['precision']} | {opts} | {r['error'][:80]} | | |")
        else:
            print(f"| {r['backend']} | {r['precision']} | {opts} | {r['mlups']:,.0f} | {r['pct']:.0f}% | {r['err']:.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
