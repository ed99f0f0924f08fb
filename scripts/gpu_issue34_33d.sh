#!/usr/bin/env bash
# Device call 3 of 2026-12-04 (issues 33/34), on the code to submit: every GPU test, the guard over whole 2D-2 runs
# (D = 80, lattice velocity 0.025, 12 s) on both GPU backends, the FEM run phases at 2048^2 on both, Numba's AMG
# set-up. scripts/gpu_issue34_33e.sh is the second half. Everything under $OUT.
#   device run: bash scripts/gpu_issue34_33d.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
{ nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
  python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
} | tee "$OUT/device.txt"
timeout 230 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 --durations=5 tests > "$OUT/pytest_gpu.txt" 2>&1
tail -12 "$OUT/pytest_gpu.txt"
C=cases/cylinder_2d2.toml
S="--set lattice.resolution=80 --set lattice.velocity=0.025 --set time.end_time=12 --set time.monitor_interval=50"
for bp in "cupy fp16s" "cupy fp16c" "numba-cuda fp16s" "numba-cuda fp16c"; do
  set -- $bp
  echo "== guard $2 whole run $1" >> "$OUT/guard.txt"
  timeout 60 python3 scripts/guard_probe.py $C --backend $1 --precision $2 $S 2>&1 | grep -v Warning >> "$OUT/guard.txt"
done
grep -E "^==|steps 384000|verdict" "$OUT/guard.txt" | cut -c1-240
P="cases/poisson_manufactured.toml --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9"
for b in cupy numba-cuda; do
  echo "== FEM phases $b" >> "$OUT/fem_phases.txt"
  timeout 80 python3 scripts/fem_run_phases.py $P --backend $b --repeat 2 --no-plots >> "$OUT/fem_phases.txt" 2>&1
done
grep -E "^==|run_s|output_s|total_s|preconditioner_setup_s" "$OUT/fem_phases.txt"
timeout 60 python3 scripts/amg_setup_bench.py --backend numba-cuda --sizes 2047 --repeat 2 > "$OUT/amg_numba.txt" 2>&1; tail -2 "$OUT/amg_numba.txt" | cut -c1-300
