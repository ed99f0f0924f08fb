#!/usr/bin/env bash
# Device call 5 of 2026-12-04c (issue 33), on the code to submit, BLAS threads pinned to 1 (the dense coarse inverse
# on the host had 16-107 ms outliers in the call before): the geometric set-up on CuPy and Numba-CUDA three times,
# the AMG set-up at 2047^2 / 4095^2 on CuPy.
#   device run: bash scripts/gpu_issue34_33o.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg PYTHONPATH=/tmp/site:$PWD OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
P="cases/poisson_manufactured.toml --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9 --set solve.reference=never"
for i in 1 2 3; do timeout 40 python3 scripts/mg_setup_backends.py $P 2>&1 | grep "^==" | cut -c1-330; done
timeout 45 python3 scripts/amg_setup_bench.py --backend cupy --sizes 2047 4095 --repeat 3 2>&1 | grep poisson | cut -c1-200
