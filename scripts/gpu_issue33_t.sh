#!/usr/bin/env bash
# Device call 5 of 2026-12-04d (issue 33), on the code to submit: every GPU test; then heat_plate_with_hole
# mesh.refine = 4 (amg, CuPy) with the reference factorized after the solve, beside the run's work that follows it
# (the set-up's time with and without a reference should now agree), bytecode compiled first.
#   device run: bash scripts/gpu_issue33_t.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
unset PYTHONDONTWRITEBYTECODE
python3 -m compileall -q -j 8 /tmp/site hpcsolve > /dev/null 2>&1; echo "compileall rc $?"
export PYTHONPATH=/tmp/site:$PWD
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
timeout 260 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests > "$OUT/pytest_gpu.txt" 2>&1
tail -3 "$OUT/pytest_gpu.txt"
H="cases/heat_plate_with_hole.toml --backend cupy --set mesh.refine=4 --set solve.preconditioner=amg"
for i in 1 2 3; do
  for ref in auto never; do
    /usr/bin/time -f "reference=$ref: process wall %e s" timeout 40 python3 -m hpcsolve.cli run $H --set solve.reference=$ref --out /tmp/hp_$i$ref > /tmp/hp.txt 2>&1
    grep -E "time_total_s|time_preconditioner_setup_s|time_reference_s|time_reference_wait_s|error_vs_fp64|process wall" /tmp/hp.txt | tr -s " " | tr "\n" ";" | cut -c1-300; echo
  done
done
