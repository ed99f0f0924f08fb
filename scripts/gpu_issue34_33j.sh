#!/usr/bin/env bash
# Device call 6 of 2026-12-04b (issue 33), on the code to submit: the GPU tests of the AMG set-up and the multigrid
# (the MIS(2) round fused into two kernels, aggregation_passes), then the AMG set-up and robustness benchmarks.
#   device run: bash scripts/gpu_issue34_33j.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests/fem/test_sa_device.py \
  tests/fem/test_multigrid.py tests/fem/test_gpu_fem.py tests/fem/test_api.py > "$OUT/pytest_gpu_fem.txt" 2>&1
tail -3 "$OUT/pytest_gpu_fem.txt"
timeout 60 python3 scripts/amg_setup_bench.py --backend cupy --sizes 2047 4095 --repeat 3 2>&1 | grep -v Warn | grep poisson | cut -c1-250
timeout 120 python3 scripts/amg_robustness.py --backend cupy --n 1024 --cook 724 --repeat 2 2>&1 | grep "amg (auto"
