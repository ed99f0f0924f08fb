#!/usr/bin/env bash
# Device call 4 of 2026-12-04b (issues 33/34), on the code to submit: every GPU test, then the 2D-2 (D = 80)
# comparison at its defaults (dry run, then the comparison), timed. scripts/gpu_issue34_33i.sh is the second half.
#   device run: bash scripts/gpu_issue34_33h.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
{ nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
  python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
} | tee "$OUT/device.txt"
timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 --durations=5 tests > "$OUT/pytest_gpu.txt" 2>&1
tail -12 "$OUT/pytest_gpu.txt"
S="--set lattice.resolution=80 --set lattice.velocity=0.025"
/usr/bin/time -f "dry-run wall %e s" timeout 60 python3 -m hpcsolve.cli compare cases/cylinder_2d2.toml $S --dry-run > "$OUT/dry.txt" 2>&1
grep -E "^compare:|wall" "$OUT/dry.txt" | cut -c1-220
/usr/bin/time -f "compare wall %e s" timeout 200 python3 -m hpcsolve.cli compare cases/cylinder_2d2.toml $S --out "$OUT/cmp" > "$OUT/compare.txt" 2>&1
grep -E "^compare:|wall|Recommendation" "$OUT/compare.txt" | grep -v "still running\|predicted numpy" | cut -c1-330
rm -rf "$OUT/cmp"/*/result.h5 "$OUT/cmp"/*/plots
