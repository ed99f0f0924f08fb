#!/usr/bin/env bash
# Device call 1 of 2026-12-04b (issues 33/34): every GPU test on the code landed at 75cdf46, and where a 2D-2 (D = 80)
# comparison spends its time outside stepping: the dry run (estimates) and one configuration (cross-check, warm-up,
# timed run, writing) under cProfile. Everything under $OUT.
#   device run: bash scripts/gpu_issue34_33f.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
{ nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
  python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
} | tee "$OUT/device.txt"
timeout 230 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 --durations=5 tests > "$OUT/pytest_gpu.txt" 2>&1
tail -12 "$OUT/pytest_gpu.txt"
S="--set lattice.resolution=80 --set lattice.velocity=0.025"
/usr/bin/time -f "dry-run wall %e s" timeout 120 python3 -m cProfile -o "$OUT/dry.prof" -m hpcsolve.cli compare cases/cylinder_2d2.toml $S --dry-run > "$OUT/dry.txt" 2>&1
tail -25 "$OUT/dry.txt"
/usr/bin/time -f "one-config wall %e s" timeout 150 python3 -m cProfile -o "$OUT/one.prof" -m hpcsolve.cli compare cases/cylinder_2d2.toml $S --backends cupy --precisions fp64 --reference cupy/fp64 --out /tmp/cmp1 > "$OUT/one.txt" 2>&1
grep -v "it/s\|s/it" "$OUT/one.txt" | tail -40
