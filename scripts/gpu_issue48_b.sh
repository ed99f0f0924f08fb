#!/usr/bin/env bash
# Device call 2 of 2026-12-07 (issue 48): Schafer-Turek 2D-1 at D = 80 with lattice velocity 0.05 (tau 1.1) beside
# 0.025 (the gate's, tau 0.8) in every precision (fp16c's c_L at 0.025 was 0.010218, under the published 0.0104),
# then `hpcsolve compare cases/cylinder_2d2.toml --backends cupy` with the periodic verdicts.
#   device run: bash scripts/gpu_issue48_b.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name --format=csv,noheader
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
for u in 0.05 0.025; do
  timeout 150 python3 scripts/validate_lbm_gpu.py --runs "2D-1" --set lattice.velocity=$u --out "$OUT/v$u" 2>/dev/null | grep "cylinder 2D-1 |" | cut -c1-330
done
start=$(date +%s)
timeout 330 python3 -m hpcsolve.cli compare cases/cylinder_2d2.toml --backends cupy --out /tmp/cmp2d2 --quiet > "$OUT/compare_2d2.txt" 2>&1
echo "compare rc $? in $(( $(date +%s) - start )) s"
cp /tmp/cmp2d2/comparison.md /tmp/cmp2d2/comparison.json "$OUT/" 2>/dev/null
tail -40 "$OUT/compare_2d2.txt"
