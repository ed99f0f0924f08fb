#!/usr/bin/env bash
# Device call 2 of 2026-12-04d (issue 33): as gpu_issue33_p.sh, with every package's bytecode compiled first (call 1's
# profile: 0.94 s of each process was Python compiling sources, the wheels being installed with --no-compile; an
# installed package has its .pyc), the figures warmed up while the reference factorizes; more set-up samples; the
# process start by part; every GPU test.
#   device run: bash scripts/gpu_issue33_q.sh   (carry: .whl .old)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-unset}; sys.dont_write_bytecode=$(python3 -c 'import sys; print(sys.dont_write_bytecode)')"
unset PYTHONDONTWRITEBYTECODE
rm -rf /tmp/before && cp -r .old/before /tmp/before && cp -r cases /tmp/before/
python3 -m compileall -q -j 8 /tmp/site hpcsolve /tmp/before/hpcsolve > /dev/null 2>&1; echo "compileall rc $?"
export PYTHONPATH=/tmp/site:$PWD
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
python3 - <<'PY'
import time
t0 = time.perf_counter()
import cupy
t1 = time.perf_counter()
x = cupy.zeros(1); x += 1; cupy.cuda.Device().synchronize()
t2 = time.perf_counter()
import hpcsolve.cli, scipy.sparse, h5py, meshio  # noqa
t3 = time.perf_counter()
import matplotlib.figure, matplotlib.tri  # noqa
t4 = time.perf_counter()
print(f"process start by part: import cupy {t1 - t0:.3f} s, CUDA context + first kernel {t2 - t1:.3f} s, "
      f"hpcsolve.cli + scipy.sparse + h5py + meshio {t3 - t2:.3f} s, matplotlib {t4 - t3:.3f} s")
PY
P="cases/poisson_manufactured.toml --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9 --set solve.reference=never"
for i in 1 2 3 4; do timeout 70 python3 scripts/mg_setup_backends.py $P --backends cupy numba-cuda numba-cuda:own 2>&1 | grep "^==" | cut -c1-60; done
H="cases/heat_plate_with_hole.toml --backend cupy --set mesh.refine=4 --set solve.preconditioner=amg"
i=0
for round in 1 2 3; do
  for tree in /tmp/before $PWD; do
    for ref in auto never; do
      i=$((i + 1))
      (cd $tree && PYTHONPATH=/tmp/site:$tree /usr/bin/time -f "$tree reference=$ref: process wall %e s" timeout 40 python3 -m hpcsolve.cli run $H --set solve.reference=$ref --out /tmp/hp_$i > /tmp/hp_$i.txt 2>&1)
      grep -E "time_total_s|time_reference_s|time_reference_wait_s|process wall" /tmp/hp_$i.txt | tr -s " " | tr "\n" ";" | cut -c1-200; echo
    done
  done
done
python3 -X importtime -m hpcsolve.cli run $H --out /tmp/hp_imp > /dev/null 2> "$OUT/importtime.txt"
python3 -m cProfile -o "$OUT/heat4.prof" -m hpcsolve.cli run $H --out /tmp/hp_prof > /dev/null 2>&1
timeout 280 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests > "$OUT/pytest_gpu.txt" 2>&1
tail -4 "$OUT/pytest_gpu.txt"
