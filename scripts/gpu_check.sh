#!/usr/bin/env bash
# One call on the GPU machine: install the carried wheels, show the backends, run the GPU tests
# and the benchmarks, write JSON + markdown under $OUT (when set), print the short tables last.
#   device run:  bash scripts/gpu_check.sh [pytest-args...]     (carry: .whl)
# Environment: BENCH_ARGS (extra args for `hpcsolve bench`), SKIP_TESTS=1, SKIP_BENCH=1,
#              BENCH_FAMILIES (default "lbm fem").
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}
mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg
status=0
python3 -m hpcsolve.cli info 2>&1 | tee "$OUT/info.txt"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$OUT/info.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -m gpu -q -p no:cacheprovider "$@" 2>&1 | tee "$OUT/pytest_gpu.txt"
  status=${PIPESTATUS[0]}
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  for fam in ${BENCH_FAMILIES:-lbm fem}; do
    python3 -m hpcsolve.cli bench "$fam" --out "$OUT" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_${fam}.txt" || status=1
  done
fi
echo "== pytest -m gpu: $(tail -n 1 "$OUT/pytest_gpu.txt" 2>/dev/null)"
for fam in ${BENCH_FAMILIES:-lbm fem}; do
  [ -f "$OUT/bench_${fam}.md" ] && { echo "== bench $fam"; cat "$OUT/bench_${fam}.md"; }
done
exit $status
