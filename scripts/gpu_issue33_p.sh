#!/usr/bin/env bash
# Device call 1 of 2026-12-04d (issue 33): Numba-CUDA's geometric set-up with its power iterations on CuPy's kernels
# (NumbaOps.launch_twin) against its own launches (numba-cuda:own) and CuPy, interleaved; heat_plate_with_hole
# mesh.refine = 4 (amg, CuPy) process wall before (dc7850a, carried in .old/before) and after (the reference beside
# the device solve, coarser figures), interleaved; where the process's time goes (importtime, cProfile); every GPU test.
#   device run: bash scripts/gpu_issue33_p.sh   (carry: .whl .old)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
rm -rf /tmp/before && cp -r .old/before /tmp/before && cp -r cases /tmp/before/
export PYTHONPATH=/tmp/site:$PWD
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
P="cases/poisson_manufactured.toml --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9 --set solve.reference=never"
for i in 1 2 3; do timeout 70 python3 scripts/mg_setup_backends.py $P --backends cupy numba-cuda numba-cuda:own 2>&1 | grep "^==" | cut -c1-330; done
H="cases/heat_plate_with_hole.toml --backend cupy --set mesh.refine=4 --set solve.preconditioner=amg"
i=0
for round in 1 2; do
  for tree in /tmp/before $PWD; do
    for ref in auto never; do
      i=$((i + 1))
      (cd $tree && PYTHONPATH=/tmp/site:$tree /usr/bin/time -f "$tree reference=$ref: process wall %e s" timeout 40 python3 -m hpcsolve.cli run $H --set solve.reference=$ref --out /tmp/hp_$i > /tmp/hp_$i.txt 2>&1)
      grep -E "time_total_s|time_reference_s|time_reference_wait_s|  reference  |process wall" /tmp/hp_$i.txt | tr -s " " | tr "\n" ";" | cut -c1-330; echo
    done
  done
done
python3 -X importtime -m hpcsolve.cli run $H --out /tmp/hp_imp > /dev/null 2> "$OUT/importtime.txt"
python3 -m cProfile -o "$OUT/heat4.prof" -m hpcsolve.cli run $H --out /tmp/hp_prof > /dev/null 2>&1
python3 -c "
import pstats; s = pstats.Stats('$OUT/heat4.prof'); s.sort_stats('cumulative').print_stats(40)" 2>&1 | grep -v "^$" | head -60 | cut -c1-160
timeout 280 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests > "$OUT/pytest_gpu.txt" 2>&1
tail -4 "$OUT/pytest_gpu.txt"
