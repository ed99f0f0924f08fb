#!/usr/bin/env bash
# Device call 2 of 2026-12-04 (issues 33/34): the guard's new GPU tests, its overhead over a whole 2D-2 run (D = 80,
# lattice velocity 0.025, 12 s; both GPU backends; fp16s must be flagged, fp16c not), false alarms: every shipped LBM
# case in fp16c (and fp16s) on CuPy at its defaults and scripts/validate_lbm_gpu.py in fp16c and fp16s, compare's
# dry run of 2D-2 at D = 80, the FEM run phases after the output change, heat_plate refine=4 split into its parts.
#   device run: bash scripts/gpu_issue34_33c.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 MPLBACKEND=Agg
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests/lbm/test_guard_arrays.py 2>&1 | tail -4
C=cases/cylinder_2d2.toml
S="--set lattice.resolution=80 --set lattice.velocity=0.025 --set time.end_time=12 --set time.monitor_interval=50"
for b in cupy numba-cuda; do
  for p in fp16s fp16c; do
    echo "== guard $p whole run $b"
    timeout 60 python3 scripts/guard_probe.py $C --backend $b --precision $p $S 2>&1 | grep -v Warning | tail -11 | cut -c1-400
  done
done
echo "== shipped LBM cases on cupy at their defaults (guard)"
for c in taylor_green poiseuille lid_driven_cavity lid_driven_cavity_re1000 cylinder_2d1 cylinder_2d2; do
  for p in fp16c fp16s; do
    timeout 90 python3 -m hpcsolve.cli run cases/$c.toml --backend cupy --precision $p --out /tmp/r_${c}_$p --quiet --no-plots >/dev/null 2>&1
    python3 - "$c" "$p" <<'PY'
import json, sys
d = json.load(open(f"/tmp/r_{sys.argv[1]}_{sys.argv[2]}/summary.json"))
m, t = d["metrics"], d["timings"]
keys = ("precision_guard_checks", "precision_guard_max_growth", "precision_guard_max_divergence", "precision_guard_flagged_step")
print(sys.argv[1], sys.argv[2], d["status"], {k: m.get(k) for k in keys}, "guard_s", t.get("precision_guard_s"),
      "build_s", t.get("precision_guard_build_s"), "step_s", round(t.get("step_s", 0), 3),
      "verdicts", {k: v.get("verdict") for k, v in d.get("validation", {}).items()})
PY
  done
done
echo "== validate_lbm_gpu fp16c fp16s (cupy)"
timeout 240 python3 scripts/validate_lbm_gpu.py --backend cupy --precisions fp16c fp16s --out /tmp/val 2>/dev/null | tail -14
echo "== compare dry run 2D-2 D=80"
timeout 60 python3 -m hpcsolve.cli compare $C --set lattice.resolution=80 --set lattice.velocity=0.025 --dry-run 2>&1 | tail -16
echo "== FEM phases cupy"
timeout 90 python3 scripts/fem_run_phases.py cases/poisson_manufactured.toml --set mesh.nx=2048 --set solve.preconditioner=mg --set solve.rtol=1e-9 --backend cupy --repeat 2 --no-plots 2>&1 | tail -13
echo "== heat_plate refine=4 amg cupy: processes (plain; no plots; no plots and no reference)"
H="cases/heat_plate_with_hole.toml --backend cupy --set mesh.refine=4 --set solve.preconditioner=amg --quiet"
TIMEFORMAT="process wall %R s"
time python3 -m hpcsolve.cli run $H --out /tmp/hpa >/dev/null 2>&1
time python3 -m hpcsolve.cli run $H --out /tmp/hpb --no-plots >/dev/null 2>&1
time python3 -m hpcsolve.cli run $H --out /tmp/hpc --no-plots --set solve.reference=never >/dev/null 2>&1
time python3 -c "import hpcsolve.cli, cupy, scipy.sparse, h5py, meshio; cupy.zeros(1).sum().get()"
python3 -c "import json;d=json.load(open('/tmp/hpc/summary.json'));print({k:round(v,3) for k,v in d['timings'].items() if isinstance(v,(int,float))})"
