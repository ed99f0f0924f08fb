#!/usr/bin/env python3
"""The accuracy gate's table (tests/accuracy_gate.py): read the JSON lines the gate's runs appended to
HPCSOLVE_GATE_OUT and print a markdown table (each run's values, its baseline and bound, pass/fail); with
``--baseline`` print the TOML of a new baseline from them instead (for a commit that says why the baseline moves).

    HPCSOLVE_GATE_OUT=$OUT/accuracy_gate.jsonl python3 -m pytest -m gpu tests/test_accuracy_gate.py
    python3 scripts/accuracy_gate.py $OUT/accuracy_gate.jsonl [--out gate.md] [--baseline]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import accuracy_gate as G  # noqa: E402


def rows(path: Path) -> list[dict]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out[row["key"]] = row          # the last line of a key wins (a rerun)
    return sorted(out.values(), key=lambda r: (r["name"], r["backend"], G.PRECISIONS.index(r["precision"])))


def table(found: list[dict]) -> str:
    runs = {r.key: r for r in G.gpu_runs() + G.cpu_runs()}
    base = G.load_baseline()
    lines = ["| run | backend | precision | status (steps) | metric | value | baseline | bound | verdict |",
             "| --- | --- | --- | --- | --- | ---: | ---: | --- | --- |"]
    for r in found:
        run = runs.get(r["key"])
        for metric, value in r["values"].items():
            b = base.get(r["key"], {}).get(metric)
            if run is not None and metric in run.errors:
                bound = f"<= {run.errors[metric]:.4g}, <= {G.GROWTH} x baseline"
            elif run is not None and metric in run.ranges:
                lo, hi = run.ranges[metric]
                bound = (f"[{lo}, {hi}], " if metric not in run.unpublished else "") + f"+-{G.RANGE_DRIFT} half-width of baseline"
            else:
                bound = ""
            verdict = "FAIL: " + "; ".join(r["fails"]) if r.get("fails") else "pass"
            guard = f", guard flagged at {r['guard_flagged_step']}" if r.get("guard_flagged_step") else ""
            lines.append(f"| {r['name']} | {r['backend']} | {r['precision']} | {r.get('status')} ({r.get('steps')}"
                         f"{guard}) | {metric} | {value:.5g} | {'' if b is None else f'{b:.5g}'} | {bound} | {verdict} |")
    return "\n".join(lines) + "\n"


def baseline_toml(found: list[dict]) -> str:
    out = ["# The accuracy gate's recorded figures (tests/accuracy_gate.py): [<run>.<backend>.<precision>] metric = value.",
           "# Change a figure only in a commit that says why (a better method, a fixed bug), never to pass the gate.", ""]
    for r in found:
        out.append(f'[{r["name"]}."{r["backend"]}".{r["precision"]}]')
        out += [f"{k} = {v!r}" for k, v in r["values"].items()]
        if r["backend"] != "numpy":
            out.append(f"guard_flagged = {'true' if r.get('guard_flagged_step') else 'false'}")
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--baseline", action="store_true", help="print a baseline TOML instead of the table")
    args = ap.parse_args(argv)
    found = rows(args.jsonl)
    text = baseline_toml(found) if args.baseline else table(found)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
