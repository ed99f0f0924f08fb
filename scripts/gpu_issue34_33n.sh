#!/usr/bin/env bash
# Device call 4 of 2026-12-04c (issue 33), on the code to submit: the geometric set-up on CuPy and Numba-CUDA against
# a142502 (carried in .old/mid: before the levels' power iterations went together and Numba-CUDA's zeros came from
# CuPy's pool), interleaved; the AMG set-up (CuPy, Numba-CUDA); heat_plate_with_hole at mesh.refine = 4 (process
# wall) and 6 (phases); then every GPU test.
#   device run: bash scripts/gpu_issue34_33n.sh   (carry: .whl .old)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
rm -rf /tmp/mid && cp -r .old/mid /tmp/mid && cp -r cases /tmp/mid/
PYTHONPATH=/tmp/site:$PWD python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
P="cases/poisson_manufactured.toml --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9 --set solve.reference=never"
for tree in /tmp/mid $PWD /tmp/mid $PWD; do
  echo "== $tree"
  (cd $tree && PYTHONPATH=/tmp/site:$tree timeout 50 python3 scripts/mg_setup_backends.py $P 2>&1 | grep "^==" | cut -c1-330)
done
export PYTHONPATH=/tmp/site:$PWD
timeout 40 python3 scripts/amg_setup_bench.py --backend cupy --sizes 2047 4095 --repeat 3 2>&1 | grep poisson | cut -c1-200
timeout 30 python3 scripts/amg_setup_bench.py --backend numba-cuda --sizes 2047 --repeat 3 2>&1 | grep poisson | cut -c1-200
H="cases/heat_plate_with_hole.toml --backend cupy --set mesh.refine=4 --set solve.preconditioner=amg"
i=0
for ref in auto never; do
  i=$((i + 1))
  /usr/bin/time -f "heat plate refine 4 reference=$ref: process wall %e s" python3 -m hpcsolve.cli run $H --set solve.reference=$ref --out /tmp/hp_$i > /tmp/hp_$i.txt 2>&1
  grep -E "time_total_s|time_reference_s|process wall" /tmp/hp_$i.txt | tr -s " " | tr "\n" ";" | cut -c1-300; echo
done
timeout 60 python3 scripts/fem_run_phases.py cases/heat_plate_with_hole.toml --backend cupy --set mesh.refine=6 --set solve.preconditioner=amg --repeat 1 2>&1 | grep -v Warn | tail -14 | cut -c1-200
timeout 230 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests > "$OUT/pytest_gpu.txt" 2>&1
tail -4 "$OUT/pytest_gpu.txt"
