#!/usr/bin/env bash
# Device call 5 of 2026-12-04b (issue 33): the AMG aggregation's second pass against the aggregation before it (the
# file carried in .old/, run from a copy of the tree) in the same call: set-up and solve at 2047^2 / 4095^2, the
# robustness problems at ~1 M unknowns against pyamg's hierarchy; Numba-CUDA's multigrid set-up and its launch cost.
#   device run: bash scripts/gpu_issue34_33i.sh   (carry: .whl .old)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
rm -rf /tmp/before && mkdir -p /tmp/before && cp -r hpcsolve scripts cases /tmp/before/ \
  && cp .old/sa_device_before.py /tmp/before/hpcsolve/fem/linalg/precond/sa_device.py
for tree in /tmp/before $PWD; do
  echo "== $tree" | tee -a "$OUT/amg.txt"
  PYTHONPATH=/tmp/site:$tree timeout 100 python3 $tree/scripts/amg_setup_bench.py --backend cupy --sizes 2047 4095 --repeat 3 2>&1 | grep -v Warn | tee -a "$OUT/amg.txt" | tail -3 | cut -c1-250
  PYTHONPATH=/tmp/site:$tree timeout 150 python3 $tree/scripts/amg_robustness.py --backend cupy --n 1024 --cook 724 --repeat 2 2>&1 | grep -v Warn | tee -a "$OUT/amg.txt" | grep "^|" | cut -c1-250
done
export PYTHONPATH=/tmp/site:$PWD
timeout 60 python3 scripts/amg_setup_bench.py --backend numba-cuda --sizes 2047 --repeat 2 2>&1 | grep -v Warn | tail -2 | cut -c1-250
P="cases/poisson_manufactured.toml --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9 --set solve.reference=never"
timeout 90 python3 scripts/mg_setup_backends.py $P 2>&1 | grep "^=="
timeout 90 python3 scripts/launch_overhead.py --case $P 2>&1 | grep -v Warn | tail -2
