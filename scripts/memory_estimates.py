"""Memory estimates (hpcsolve.core.memory) against the measured peak, over several sizes.

Each configuration runs as `hpcsolve run` in a subprocess of its own; its peak resident memory is
the child's own high-water mark VmHWM from /proc/self/status, read as it exits (ru_maxrss of a
child would include this script's memory: Linux carries the parent's high-water mark through fork
and exec), with ru_maxrss (os.wait4) where /proc is missing. On a GPU the peak device memory is the
CuPy memory pool's high-water mark (cupy) or the peak of used device memory polled every 5 ms
(numba-cuda). Prints a markdown table: estimate, measured, estimate / measured.

    python scripts/memory_estimates.py                      # NumPy reference, CPU sizes (a few GB)
    python scripts/memory_estimates.py --backend cupy       # GPU: host and device, larger sizes
    python scripts/memory_estimates.py --quick              # two small sizes per family
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "cases"
SHORT_LBM = ["time.steps=20", "time.monitor_interval=10", "steady.enabled=false"]
SHORT_FEM = ["solve.maxiter=200"]      # the peak is in assembly and setup; a short solve keeps runs quick


def configurations(backend: str, quick: bool) -> list[tuple[str, str, list[str], list[str]]]:
    """(label, case file, overrides, extra CLI arguments)."""
    gpu = backend != "numpy"
    lbm_sizes = ([256, 512] if quick else [500, 1000, 2000]) if not gpu else ([1024, 4096] if quick else [2048, 4096, 8192])
    out = []
    for n in lbm_sizes:
        out.append((f"LBM cavity fp64, resolution {n}", "lid_driven_cavity.toml",
                    [f"lattice.resolution={n}", *SHORT_LBM], ["--precision", "fp64"]))
    if not quick:
        n = lbm_sizes[-1]
        for prec in ("fp32", "fp16s"):
            out.append((f"LBM cavity {prec}, resolution {n}", "lid_driven_cavity.toml",
                        [f"lattice.resolution={n}", *SHORT_LBM], ["--precision", prec]))
        if gpu:
            out.append((f"LBM cavity fp32 in-place, resolution {n}", "lid_driven_cavity.toml",
                        [f"lattice.resolution={n}", "lattice.streaming=\"in-place\"", *SHORT_LBM],
                        ["--precision", "fp32"]))
        m = lbm_sizes[0]
        out.append((f"LBM cavity fp64, resolution {m}, 40 snapshots", "lid_driven_cavity.toml",
                    [f"lattice.resolution={m}", "time.steps=40", "time.monitor_interval=10",
                     f"time.output_interval={1.0 / m * 0.1:.12g}", "steady.enabled=false"], ["--precision", "fp64"]))
        out.append((f"LBM cylinder 2D-1 (Bouzidi), diameter {m // 10}", "cylinder_2d1.toml",
                    [f"lattice.resolution={m // 10}", *SHORT_LBM], ["--precision", "fp64"]))
    fem_sizes = ([100, 250] if quick else [250, 500, 1000]) if not gpu else ([500, 1000] if quick else [1000, 2000])
    for n in fem_sizes:
        out.append((f"FEM Poisson (manufactured), mesh.nx {n}", "poisson_manufactured.toml",
                    [f"mesh.nx={n}", *SHORT_FEM], []))
    if not quick:
        for n in ([150, 400] if not gpu else [500, 1000]):
            out.append((f"FEM Cook membrane (elasticity), mesh.nx {n}", "cook_membrane.toml",
                        [f"mesh.nx={n}", *SHORT_FEM], []))
        out.append(("FEM Poisson, mesh.nx 125, mesh.refine 2", "poisson_manufactured.toml",
                    ["mesh.nx=125", "mesh.refine=2", *SHORT_FEM], []))
    return out


def estimate(case_file: str, overrides: list[str], backend: str, precision: str | None) -> dict:
    from hpcsolve import run as runmod  # late: hpcsolve loads inside the measured process

    info = runmod.describe(CASES / case_file, backend, precision, overrides)
    return {"host": info["host_memory_bytes"], "device": info.get("device_memory_bytes")}


def measure(case_file: str, overrides: list[str], extra: list[str], backend: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "device.json"
        cmd = [sys.executable, __file__, "--child", str(report), "run", str(CASES / case_file), "--backend", backend,
               "--out", str(Path(tmp) / "out"), "--quiet", *extra]
        for o in overrides:
            cmd += ["--set", o]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        err = proc.stderr.read().decode(errors="replace")
        proc.stderr.close()
        reported = json.loads(report.read_text()) if report.exists() else {}
    device = reported.get("device_peak")
    host = reported.get("host_peak") or usage.ru_maxrss * 1024
    rc = os.waitstatus_to_exitcode(status)
    if rc not in (0, 3):      # 3: not converged in the short solve; the memory peak is still measured
        print(f"  {case_file} {overrides}: exit {rc}: {err.strip()[-400:]}", file=sys.stderr)
    return {"host": host, "device": device, "rc": rc, "seconds": time.perf_counter() - t0}


def child(report: str, argv: list[str]) -> int:
    """Run the CLI here, recording the peak device memory of a GPU backend into ``report``."""
    backend = argv[argv.index("--backend") + 1]
    peak = {"device_peak": None}
    stop = threading.Event()
    if backend == "cupy":
        import cupy  # late: optional GPU module (device peaks on a GPU only)

        pool = cupy.get_default_memory_pool()

        def record():
            peak["device_peak"] = int(pool.total_bytes())   # the pool keeps freed blocks: its size is the high-water
    elif backend == "numba-cuda":
        from numba import cuda  # late: optional GPU module (device peaks on a GPU only)

        free0, _ = cuda.current_context().get_memory_info()
        high = [0]

        def poll():
            with cuda.gpus[0]:     # the polling thread needs the device's context current
                ctx = cuda.current_context()
                while not stop.is_set():
                    free, _ = ctx.get_memory_info()
                    high[0] = max(high[0], free0 - free)
                    time.sleep(0.005)

        threading.Thread(target=poll, daemon=True).start()

        def record():
            peak["device_peak"] = int(high[0])
    else:
        def record():
            pass
    from hpcsolve import cli  # late: hpcsolve loads inside the measured process

    try:
        return cli.main(argv)
    finally:
        stop.set()
        record()
        peak["host_peak"] = _own_high_water()
        Path(report).write_text(json.dumps(peak))


def _own_high_water() -> int | None:
    """This process's peak resident memory since its exec (VmHWM), bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="numpy", choices=("numpy", "cupy", "numba-cuda"))
    parser.add_argument("--quick", action="store_true", help="two small sizes per family")
    args = parser.parse_args()
    rows = []
    gpu = args.backend != "numpy"
    head = "| configuration | host estimate | host measured | ratio |" + (" device estimate | device measured | ratio |" if gpu else "")
    print(head)
    print("|---|---:|---:|---:|" + ("---:|---:|---:|" if gpu else ""))
    for label, case_file, overrides, extra in configurations(args.backend, args.quick):
        precision = extra[extra.index("--precision") + 1] if "--precision" in extra else None
        est = estimate(case_file, overrides, args.backend, precision)
        got = measure(case_file, overrides, extra, args.backend)
        line = f"| {label} | {est['host'] / 2**20:,.0f} MiB | {got['host'] / 2**20:,.0f} MiB | {est['host'] / got['host']:.2f} |"
        if gpu:
            if est["device"] and got["device"]:
                line += (f" {est['device'] / 2**20:,.0f} MiB | {got['device'] / 2**20:,.0f} MiB | "
                         f"{est['device'] / got['device']:.2f} |")
            else:
                line += " - | - | - |"
        print(line, flush=True)
        rows.append({"label": label, "estimate": est, "measured": got})
    worst = max(abs(r["estimate"]["host"] / r["measured"]["host"] - 1) for r in rows)
    print(f"\nlargest host deviation: {100 * worst:.0f} %")
    if gpu:
        dev = [abs(r["estimate"]["device"] / r["measured"]["device"] - 1) for r in rows
               if r["estimate"]["device"] and r["measured"]["device"]]
        if dev:
            print(f"largest device deviation: {100 * max(dev):.0f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
