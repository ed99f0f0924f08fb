#!/usr/bin/env bash
# Device call 3 of 2026-12-04d (issue 33), on the code to submit: every GPU test; the AMG set-up at 2047^2 / 4095^2
# on CuPy and Numba-CUDA (the row-maximum kernels through one launch helper again); the geometric set-up on CuPy,
# Numba-CUDA (power iterations on CuPy's kernels) and Numba-CUDA on its own launches, three times.
#   device run: bash scripts/gpu_issue33_r.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export PYTHONPATH=/tmp/site:$PWD
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
timeout 280 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests > "$OUT/pytest_gpu.txt" 2>&1
tail -3 "$OUT/pytest_gpu.txt"
timeout 60 python3 scripts/amg_setup_bench.py --backend cupy --sizes 2047 4095 --repeat 3 2>&1 | grep poisson | cut -c1-200
timeout 40 python3 scripts/amg_setup_bench.py --backend numba-cuda --sizes 2047 --repeat 3 2>&1 | grep poisson | cut -c1-200
P="cases/poisson_manufactured.toml --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9 --set solve.reference=never"
for i in 1 2 3; do timeout 70 python3 scripts/mg_setup_backends.py $P --backends cupy numba-cuda numba-cuda:own 2>&1 | grep "^==" | cut -c1-60; done
