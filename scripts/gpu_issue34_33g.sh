#!/usr/bin/env bash
# Device call 2 of 2026-12-04b (issue 34): the 2D-2 (D = 80) comparison at its defaults (both GPU backends) with the
# batched-point estimate, the 8 s cross-check and the per-configuration wall breakdown; its dry run first, timed.
#   device run: bash scripts/gpu_issue34_33g.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
{ nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
  python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
} | tee "$OUT/device.txt"
S="--set lattice.resolution=80 --set lattice.velocity=0.025"
/usr/bin/time -f "dry-run wall %e s" timeout 120 python3 -m hpcsolve.cli compare cases/cylinder_2d2.toml $S --dry-run > "$OUT/dry.txt" 2>&1
grep -v Warning "$OUT/dry.txt" | grep -v "warn(" | cut -c1-200 | tail -16
/usr/bin/time -f "compare wall %e s" timeout 330 python3 -m hpcsolve.cli compare cases/cylinder_2d2.toml $S --out "$OUT/cmp" > "$OUT/compare.txt" 2>&1
grep -E "^compare:|wall|Recommendation" "$OUT/compare.txt" | grep -v "still running" | cut -c1-330
rm -rf "$OUT/cmp"/*/result.h5
