#!/usr/bin/env bash
# Device call 3 of 2026-12-04c (issue 33), on the code to submit: the multigrid set-ups before (the tree of 8047a67,
# carried in .old/before) and after (a142502: no host round trips in the set-up), interleaved in one call; the process
# start of a GPU run by part; heat_plate_with_hole (amg) at mesh.refine = 4 (process wall) and 6 (phases, before and
# after the file-mesh changes); then every GPU test.
#   device run: bash scripts/gpu_issue34_33m.sh   (carry: .whl .old)
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
  PYTHONPATH=/tmp/site:$tree timeout 45 python3 $tree/scripts/amg_setup_bench.py --backend cupy --sizes 2047 4095 --repeat 3 2>&1 | grep poisson | cut -c1-200
  PYTHONPATH=/tmp/site:$tree timeout 30 python3 $tree/scripts/amg_setup_bench.py --backend numba-cuda --sizes 2047 --repeat 3 2>&1 | grep poisson | cut -c1-200
  (cd $tree && PYTHONPATH=/tmp/site:$tree timeout 60 python3 scripts/mg_setup_backends.py $P 2>&1 | grep "^==" | cut -c1-330)
done
export PYTHONPATH=/tmp/site:$PWD
python3 - <<'PY'
import time
t0 = time.perf_counter()
import cupy
t1 = time.perf_counter()
x = cupy.zeros(1); x += 1; cupy.cuda.Device().synchronize()
t2 = time.perf_counter()
import hpcsolve.cli, scipy.sparse, h5py, meshio  # noqa
t3 = time.perf_counter()
print(f"process start by part: import cupy {t1 - t0:.3f} s, CUDA context + first kernel {t2 - t1:.3f} s, "
      f"hpcsolve.cli + scipy.sparse + h5py + meshio {t3 - t2:.3f} s")
PY
/usr/bin/time -f "bare interpreter + cupy + context: wall %e s" python3 -c "import cupy; cupy.zeros(1).sum().get()"
H="cases/heat_plate_with_hole.toml --backend cupy --set mesh.refine=4 --set solve.preconditioner=amg"
i=0
for ref in auto never auto never; do
  i=$((i + 1))
  /usr/bin/time -f "heat plate refine 4 reference=$ref: process wall %e s" python3 -m hpcsolve.cli run $H --set solve.reference=$ref --out /tmp/hp_$i > /tmp/hp_$i.txt 2>&1
  grep -E "time_total_s|time_reference_s|  reference  |process wall" /tmp/hp_$i.txt | tr -s " " | tr "\n" ";" | cut -c1-300; echo
done
for tree in /tmp/before $PWD; do
  (cd $tree && PYTHONPATH=/tmp/site:$tree timeout 80 python3 scripts/fem_run_phases.py cases/heat_plate_with_hole.toml --backend cupy --set mesh.refine=6 --set solve.preconditioner=amg --repeat 1 2>&1 | grep -v Warn | tail -14 | cut -c1-200)
done
timeout 250 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests > "$OUT/pytest_gpu.txt" 2>&1
tail -4 "$OUT/pytest_gpu.txt"
