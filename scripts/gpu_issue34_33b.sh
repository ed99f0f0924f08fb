#!/usr/bin/env bash
# One device call (2026-12-04, second round of issues 33/34): the new GPU tests (the guard's device rewind, Numba's
# device multigrid set-up), the guard's overhead on 2D-2 (array path against the host path, both GPU backends), the
# device SA set-up profile, the FEM run phases on both GPU backends and heat_plate refine=4 (two processes: cold
# and warm kernel caches). Writes under $OUT.   device run: bash scripts/gpu_issue34_33b.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth', copy_bandwidth('cupy'))" 2>&1 | tail -1
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests/lbm/test_guard_arrays.py \
  tests/fem/test_sa_device.py tests/fem/test_multigrid.py 2>&1 | tail -15
C=cases/cylinder_2d2.toml
S="--set lattice.resolution=80 --set lattice.velocity=0.025 --set time.end_time=12 --set time.monitor_interval=50"
for b in cupy numba-cuda; do
  for path in "" "--host-path"; do
    echo "== guard fp16s whole run $b $path"
    timeout 60 python3 scripts/guard_probe.py $C --backend $b --precision fp16s $S $path 2>&1 | grep -v Warning | tail -12
  done
done
echo "== SA profile cupy"; timeout 100 python3 scripts/sa_profile.py --sizes 2047 4095 --repeat 2 2>&1 | tail -4
echo "== AMG set-up cupy"; timeout 100 python3 scripts/amg_setup_bench.py --backend cupy --sizes 2047 4095 --repeat 2 2>&1 | tail -4
echo "== AMG set-up numba"; timeout 100 python3 scripts/amg_setup_bench.py --backend numba-cuda --sizes 2047 --repeat 2 2>&1 | tail -2
P="cases/poisson_manufactured.toml --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9"
for b in cupy numba-cuda; do
  echo "== FEM phases $b"; timeout 90 python3 scripts/fem_run_phases.py $P --backend $b --repeat 2 --no-plots 2>&1 | tail -14
done
for i in 1 2; do
  echo "== heat_plate refine=4 amg cupy, process $i"
  TIMEFORMAT="process wall %R s"; time timeout 90 python3 -m hpcsolve.cli run cases/heat_plate_with_hole.toml --backend cupy \
    --set mesh.refine=4 --set solve.preconditioner=amg --out /tmp/hp$i --quiet 2>&1 | tail -3
  python3 -c "import json;d=json.load(open('/tmp/hp$i/summary.json'));print({k:round(v,3) for k,v in d['timings'].items() if isinstance(v,(int,float))})" 2>&1 | tail -2
done
