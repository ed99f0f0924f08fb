#!/usr/bin/env bash
# Device call 4 of 2026-12-04 (issues 33/34), second half of gpu_issue34_33d.sh: `hpcsolve compare` of 2D-2 at
# D = 80 (target: <= 3 minutes with a GPU fp64 reference), AMG against Jacobi-PCG and pyamg's hierarchy on the
# robustness problems at >= 1 M unknowns, and bench fem's whole-run table on the GPU backends. Everything under $OUT.
#   device run: bash scripts/gpu_issue34_33e.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1 | tee "$OUT/device.txt"
SECONDS=0
timeout 230 python3 -m hpcsolve.cli compare cases/cylinder_2d2.toml --set lattice.resolution=80 \
  --set lattice.velocity=0.025 --out "$OUT/compare_2d2" > "$OUT/compare.txt" 2>&1
echo "compare exit $? after $SECONDS s" | tee -a "$OUT/compare.txt"
grep -v "Warning\|warn(" "$OUT/compare.txt" | tail -22 | cut -c1-400
timeout 150 python3 scripts/amg_robustness.py --backend cupy --n 1024 --cook 724 --repeat 2 > "$OUT/amg_robustness.txt" 2>&1
cat "$OUT/amg_robustness.txt" | tail -12
timeout 130 python3 -m hpcsolve.cli bench fem --backends cupy numba-cuda --sizes 64 --precisions fp64 --no-multigrid \
  --no-robustness --whole-run-levels 1 3 5 --whole-run-repeats 1 --out "$OUT/bench_fem" > "$OUT/bench_fem.txt" 2>&1
grep -A30 -i "whole run" "$OUT/bench_fem.txt" | tail -25 | cut -c1-300
