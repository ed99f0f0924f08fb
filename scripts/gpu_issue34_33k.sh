#!/usr/bin/env bash
# Device call 7 of 2026-12-04b (issue 33): the AMG set-up at 2047^2 / 4095^2 with the MIS(2) round as array code
# (sa_device.py of 733f2ce, carried in .old/, run from a copy of the tree) and fused into two kernels, in one call.
#   device run: bash scripts/gpu_issue34_33k.sh   (carry: .whl .old)
set -uo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1
rm -rf /tmp/arr && mkdir -p /tmp/arr && cp -r hpcsolve scripts /tmp/arr/ && cp .old/sa_device_733.py /tmp/arr/hpcsolve/fem/linalg/precond/sa_device.py
for tree in /tmp/arr $PWD /tmp/arr $PWD; do
  echo "== $tree"
  PYTHONPATH=/tmp/site:$tree timeout 50 python3 $tree/scripts/amg_setup_bench.py --backend cupy --sizes 2047 4095 --repeat 3 2>&1 | grep poisson | cut -c1-150
done
