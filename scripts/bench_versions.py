"""Before/after benchmark of two source trees in one device run: ``hpcsolve bench lbm`` and ``bench fem``
of each tree, interleaved (old, new, old, new, ...) so that clock or thermal drift hits both, then one
markdown table of the rows both produced: the median over rounds of each version and new / old.

    python scripts/bench_versions.py OLD_TREE NEW_TREE [--rounds 2] [--families lbm fem] [--out DIR]
                                     [--lbm-args "--sizes 8192"] [--fem-args "--sizes 2048 4096"] [--new-args ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
from pathlib import Path


def _bench(tree: Path, family: str, out: Path, extra: str) -> dict | None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "MPLBACKEND": "Agg"}
    env.pop("OUT", None)
    cmd = [sys.executable, "-m", "hpcsolve.cli", "bench", family, "--out", str(out), *shlex.split(extra)]
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    (out / f"{family}.log").write_text(proc.stdout + proc.stderr)
    found = sorted(out.glob(f"bench_{family}*.json"))      # bench_lbm.json, bench_lbm_in_place.json
    path = found[0] if found else out / f"bench_{family}.json"
    if proc.returncode != 0 or not path.exists():
        print(f"{tree.name} bench {family} failed (rc {proc.returncode}): {proc.stderr.strip()[-300:]}", flush=True)
        return None
    return json.loads(path.read_text())


def _rows(family: str, data: dict) -> dict[tuple, float]:
    """Comparable figures: LBM MLUPS per (backend, precision, size); FEM ms per iteration per row, and
    time to solution per (size, precision, method)."""
    out = {}
    if family == "lbm":
        for r in data.get("rows", []):
            if "mlups" in r:
                out[("lbm", r["backend"], r["precision"], f"{r['size']}^2", "MLUPS")] = r["mlups"]
        out[("lbm", "copy", "", "", "GB/s")] = data.get("copy_bandwidth_GBps")
    else:
        for r in data.get("rows", []):
            out[("fem", r["backend"], f"{r['variant']} {r['precision']}", f"{r['m']}^2", "ms/it")] = r["ms_per_iteration"]
        for s in data.get("solve", []):
            out[("fem", "solve", f"{s['precision']} {s['method']}", f"{s['m']}^2", "ms to 1e-10")] = s["time_s"] * 1e3
        bw = data.get("copy_bandwidth", {})
        out[("fem", "copy", "", "", "GB/s")] = bw.get("bandwidth_GBps")
    return {k: v for k, v in out.items() if isinstance(v, (int, float))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--families", nargs="+", default=["lbm", "fem"])
    p.add_argument("--lbm-args", default="")
    p.add_argument("--fem-args", default="")
    p.add_argument("--new-args", default="", help="appended for the new tree only (options the old one lacks, "
                   "e.g. \"--no-multigrid\")")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "results/bench_versions")))
    args = p.parse_args(argv)
    figures: dict[str, dict[tuple, list]] = {"old": {}, "new": {}}
    for rnd in range(args.rounds):
        for family in args.families:
            extra = args.lbm_args if family == "lbm" else args.fem_args
            for label, tree in (("old", args.old), ("new", args.new)) if rnd % 2 == 0 else (("new", args.new), ("old", args.old)):
                data = _bench(tree.resolve(), family, args.out / f"{label}_{family}_{rnd}",
                              f"{extra} {args.new_args}" if label == "new" else extra)
                for k, v in (_rows(family, data) if data else {}).items():
                    figures[label].setdefault(k, []).append(v)
                print(f"round {rnd} {family} {label}: {'ok' if data else 'failed'}", flush=True)
    lines = [f"Before ({args.old.resolve().name}) / after ({args.new.resolve().name}), {args.rounds} interleaved rounds, median of rounds:", "",
             "| family | backend | variant | size | unit | before | after | after / before |",
             "| --- | --- | --- | --- | --- | ---: | ---: | ---: |"]
    for key in sorted(set(figures["old"]) & set(figures["new"])):
        a, b = statistics.median(figures["old"][key]), statistics.median(figures["new"][key])
        lines.append(f"| {' | '.join(key)} | {a:,.4g} | {b:,.4g} | {b / a:.3f} |")
    only = sorted(set(figures["old"]) ^ set(figures["new"]))
    if only:
        lines += ["", "Rows only one version produced: " + "; ".join(" ".join(k) for k in only)]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench_versions.md").write_text(text)
    (args.out / "bench_versions.json").write_text(json.dumps(
        {lbl: {" | ".join(k): v for k, v in f.items()} for lbl, f in figures.items()}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
