#!/usr/bin/env bash
# Device call 2 of 2026-12-04c (issue 33): the multigrid set-ups before (the tree of 8047a67, carried in .old/before)
# and after (the Lanczos and power iterations without a host synchronization per step, the probing products as
# blocks), interleaved in one call: the AMG set-up at 2047^2 / 4095^2 (CuPy, Numba-CUDA), the geometric set-up of the
# 2048^2 FEM run on both backends; then where the AMG set-up's time goes (cProfile, sa_profile) and the FEM GPU tests.
#   device run: bash scripts/gpu_issue34_33l.sh   (carry: .whl .old)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
rm -rf /tmp/before && cp -r .old/before /tmp/before && cp -r cases /tmp/before/
PYTHONPATH=/tmp/site:$PWD python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
P="cases/poisson_manufactured.toml --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9 --set solve.reference=never"
for tree in /tmp/before $PWD /tmp/before $PWD; do
  echo "== $tree"
  PYTHONPATH=/tmp/site:$tree timeout 60 python3 $tree/scripts/amg_setup_bench.py --backend cupy --sizes 2047 4095 --repeat 3 2>&1 | grep poisson | cut -c1-240
  PYTHONPATH=/tmp/site:$tree timeout 40 python3 $tree/scripts/amg_setup_bench.py --backend numba-cuda --sizes 2047 --repeat 3 2>&1 | grep poisson | cut -c1-240
  (cd $tree && PYTHONPATH=/tmp/site:$tree timeout 90 python3 scripts/mg_setup_backends.py $P 2>&1 | grep "^==")
done
export PYTHONPATH=/tmp/site:$PWD
timeout 60 python3 scripts/mg_setup_profile.py 2047 amg > "$OUT/amg_profile.txt" 2>&1; grep "set-up" "$OUT/amg_profile.txt"
timeout 60 python3 scripts/sa_profile.py --sizes 2047 --repeat 3 2>&1 | grep -v Warn | tail -4 | cut -c1-400
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests/fem > "$OUT/pytest_fem_gpu.txt" 2>&1
tail -3 "$OUT/pytest_fem_gpu.txt"
