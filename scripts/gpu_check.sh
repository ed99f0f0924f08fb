#!/usr/bin/env bash
# One call on the GPU machine: install the carried wheels, show the backends, run the GPU tests and
# the benchmarks (optionally the validation runs and the comparisons), write markdown/JSON under
# $OUT (when set; else gpu_out/) and logs under $LOG, and print the short tables last.
#   device run:  bash scripts/gpu_check.sh [pytest-args...]     (carry: .whl)
# Environment: GPU_WORKERS (pytest-xdist workers for the GPU tests, default 4), SKIP_TESTS=1, SKIP_BENCH=1, BENCH_FAMILIES (default "lbm fem"), BENCH_ARGS (extra args
# for `hpcsolve bench`), VALIDATE=1 (scripts/validate_lbm_gpu.py), COMPARE=1 (hpcsolve compare on the
# cavity and the manufactured Poisson case with every backend), PC_COMPARE=1 (hpcsolve compare of the
# shipped FEM cases on CuPy with every preconditioner), FEM_JUDGE=1 (compare of the manufactured Poisson case at
# 256^2 on the GPU backends, judged by solution), ESTIMATES=1 (scripts/fem_estimate_check.py on CuPy at 255, 1023,
# 2047), LOG (default /tmp/hpcsolve_gpu_logs).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
LOG=${LOG:-/tmp/hpcsolve_gpu_logs}
mkdir -p "$OUT" "$LOG"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
# the accuracy gate's runs (tests/test_accuracy_gate.py, part of -m gpu) append their values here
export HPCSOLVE_GATE_OUT=${HPCSOLVE_GATE_OUT:-$OUT/accuracy_gate.jsonl}
rm -f "$HPCSOLVE_GATE_OUT"
status=0
python3 -m hpcsolve.cli info 2>&1 | tee "$LOG/info.txt"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$LOG/info.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  # 4 workers (pytest-xdist): the GPU suite in about 2 minutes on the H200 (docs/design/testing.md keeps the figure);
  # GPU_WORKERS=0 runs it in one process
  python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfEs -n "${GPU_WORKERS:-4}" --durations=15 "$@" \
      2>&1 | tee "$OUT/pytest_gpu.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  for fam in ${BENCH_FAMILIES:-lbm fem}; do
    python3 -m hpcsolve.cli bench "$fam" --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$LOG/bench_${fam}.txt" || status=1
  done
fi
if [ "${VALIDATE:-0}" = 1 ]; then
  python3 scripts/validate_lbm_gpu.py --out "$LOG" 2>&1 | tee "$LOG/validate.txt" || status=1
  cp "$LOG/validate_lbm_gpu.md" "$OUT/" 2>/dev/null
fi
if [ "${COMPARE:-0}" = 1 ]; then
  for c in lid_driven_cavity poisson_manufactured; do
    rm -rf "$LOG/compare_$c"
    python3 -m hpcsolve.cli compare "cases/$c.toml" --out "$LOG/compare_$c" --quiet 2>&1 | tee "$LOG/compare_$c.txt" \
      || status=1
    cp "$LOG/compare_$c/comparison.md" "$OUT/compare_$c.md" 2>/dev/null
  done
fi
if [ "${PC_COMPARE:-0}" = 1 ]; then
  for c in poisson_manufactured cook_membrane heat_plate_with_hole; do
    rm -rf "$LOG/pc_$c"
    python3 -m hpcsolve.cli compare "cases/$c.toml" --backends cupy --precisions fp64 mixed \
      --preconditioners none jacobi mg amg --out "$LOG/pc_$c" --quiet 2>&1 | tail -n 30 | tee "$LOG/pc_$c.txt" || status=1
    cp "$LOG/pc_$c/comparison.md" "$OUT/compare_pc_$c.md" 2>/dev/null
  done
fi
if [ "${FEM_JUDGE:-0}" = 1 ]; then
  # the FEM precision question at 256^2: fp32's solution error against the discretisation error (compare --judge)
  rm -rf "$LOG/judge_poisson"
  timeout "${JUDGE_TIMEOUT:-150}" python3 -m hpcsolve.cli compare cases/poisson_manufactured.toml --set mesh.nx=256 \
      --backends cupy numba-cuda --out "$LOG/judge_poisson" --quiet 2>&1 | tail -n 40 | tee "$LOG/judge_poisson.txt" \
      || status=1
  cp "$LOG/judge_poisson/comparison.md" "$OUT/compare_judge_poisson_256.md" 2>/dev/null
fi
if [ "${ESTIMATES:-0}" = 1 ]; then
  # FEM run-time and iteration estimates against measured runs (within 2x is the target)
  timeout "${ESTIMATES_TIMEOUT:-200}" python3 scripts/fem_estimate_check.py --backends cupy --sizes 255 1023 2047 \
      --time-limit $(( ${ESTIMATES_TIMEOUT:-200} - 40 )) --out "$OUT/estimates" 2>&1 | tail -n 60 | tee "$LOG/estimates.txt" || status=1
fi
if [ -s "$HPCSOLVE_GATE_OUT" ]; then
  python3 scripts/accuracy_gate.py "$HPCSOLVE_GATE_OUT" --out "$OUT/accuracy_gate.md" > /dev/null
fi
echo "== pytest -m gpu: $(tail -n 1 "$OUT/pytest_gpu.txt" 2>/dev/null)"
for f in "$OUT"/accuracy_gate.md "$OUT"/bench_*.md "$OUT"/validate_lbm_gpu.md "$OUT"/compare_*.md; do
  [ -f "$f" ] && { echo "== $(basename "$f")"; cat "$f"; }
done
exit $status
