#!/usr/bin/env bash
# One device call for issues 33-35 (2026-12-04): the GPU tests, then the measurements the issues name:
# monitor overhead of Cylinder 2D-2 (D = 80, lattice velocity 0.025, monitor every 50 steps, 12 s as in issue 34),
# the 16-bit guard on the same run (fp16s must be flagged in its first 10 %, fp16c not; its overhead), the FEM run's
# phases at 2048^2 on both GPU backends, and the device AMG set-up. Writes under $OUT.
#   device run:  bash scripts/gpu_issue34_33.sh     (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth', copy_bandwidth('cupy'))" 2>&1 | tail -1
timeout 240 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 --durations=8 tests 2>&1 | tail -25 > "$OUT/pytest_gpu.txt"
cat "$OUT/pytest_gpu.txt"
C=cases/cylinder_2d2.toml
S="--set lattice.resolution=80 --set lattice.velocity=0.025 --set time.end_time=12 --set time.monitor_interval=50"
for b in cupy numba-cuda; do
  echo "== monitor overhead $b"; timeout 90 python3 scripts/monitor_overhead.py $C --backend $b $S --repeats 2 2>&1 | tail -4
done
echo "== monitor overhead cupy, host points"; timeout 60 python3 scripts/monitor_overhead.py $C --backend cupy $S --repeats 1 --host-points 2>&1 | tail -3
for p in fp16s fp16c; do
  echo "== guard $p, first 10 %"; timeout 60 python3 scripts/guard_probe.py $C --backend cupy --precision $p $S --steps 40000 2>&1 | grep -v Warning | tail -9
done
for b in cupy numba-cuda; do
  echo "== guard fp16s whole run $b (overhead)"; timeout 60 python3 scripts/guard_probe.py $C --backend $b --precision fp16s $S 2>&1 | grep -v Warning | tail -3
done
P="cases/poisson_manufactured.toml --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9"
for b in cupy numba-cuda; do
  echo "== FEM phases $b"; timeout 90 python3 scripts/fem_run_phases.py $P --backend $b --repeat 2 --no-plots 2>&1 | tail -14
done
echo "== AMG set-up cupy"; timeout 120 python3 scripts/amg_setup_bench.py --backend cupy --sizes 2047 4095 --repeat 2 2>&1 | tail -12
