#!/usr/bin/env bash
# Device call 4 of 2026-12-04d (issue 33), on the code to submit: heat_plate_with_hole mesh.refine = 4 (amg, CuPy)
# process wall, before (c978883, carried in .old/mid: the reference wholly in its thread) and after (its ordering and
# residual on the run's thread, only SuperLU beside the solve; the CuPy probe beside the case's loading), interleaved,
# bytecode compiled first (the machine sets PYTHONDONTWRITEBYTECODE=1); then every GPU test.
#   device run: bash scripts/gpu_issue33_s.sh   (carry: .whl .old)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
unset PYTHONDONTWRITEBYTECODE
rm -rf /tmp/mid && cp -r .old/mid /tmp/mid && cp -r cases /tmp/mid/
python3 -m compileall -q -j 8 /tmp/site hpcsolve /tmp/mid/hpcsolve > /dev/null 2>&1; echo "compileall rc $?"
export PYTHONPATH=/tmp/site:$PWD
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
H="cases/heat_plate_with_hole.toml --backend cupy --set mesh.refine=4 --set solve.preconditioner=amg"
i=0
for round in 1 2 3 4; do
  for tree in /tmp/mid $PWD; do
    for ref in auto never; do
      i=$((i + 1))
      (cd $tree && PYTHONPATH=/tmp/site:$tree /usr/bin/time -f "$tree reference=$ref: process wall %e s" timeout 40 python3 -m hpcsolve.cli run $H --set solve.reference=$ref --out /tmp/hp_$i > /tmp/hp_$i.txt 2>&1)
      grep -E "time_total_s|time_solve_s|time_preconditioner_setup_s|time_reference_s|time_reference_wait_s|error_vs_fp64|process wall" /tmp/hp_$i.txt | tr -s " " | tr "\n" ";" | cut -c1-330; echo
    done
  done
done
timeout 280 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests > "$OUT/pytest_gpu.txt" 2>&1
tail -3 "$OUT/pytest_gpu.txt"
