#!/usr/bin/env bash
# Device call 4 of 2026-12-07 (issues 48 and 49), on the code to submit: the copy bandwidth, every GPU test (the
# accuracy gate included, against its baseline), the gate's table, then `bench lbm --quick` and `bench fem --quick`
# (without the robustness and whole-run tables): planned at the default sizes, cut down after four failed machine
# starts had spent the device time.
#   device run: bash scripts/gpu_issue48_d.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export PYTHONPATH=/tmp/site:$PWD HPCSOLVE_GATE_OUT=$OUT/accuracy_gate.jsonl
END=$(( $(date +%s) + ${BUDGET_S:-290} ))              # the whole call ends by then (the device time left)
left() { local l=$(( END - $(date +%s) )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
git log --oneline -1 2>/dev/null
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
start=$(date +%s)
timeout "$(left 185)" python3 -m pytest -m gpu -v -p no:cacheprovider -W ignore::Warning -rfE -n 4 --durations=10 tests > "$OUT/pytest_gpu.txt" 2>&1
echo "pytest -m gpu rc $? in $(( $(date +%s) - start )) s"
grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -1
echo "per-test lines: $(grep -c ' PASSED ' "$OUT/pytest_gpu.txt") passed, $(grep -c ' FAILED ' "$OUT/pytest_gpu.txt") failed, $(grep -c ' SKIPPED ' "$OUT/pytest_gpu.txt") skipped"
grep ' FAILED ' "$OUT/pytest_gpu.txt" | head
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
python3 scripts/accuracy_gate.py "$OUT/accuracy_gate.jsonl" --out "$OUT/accuracy_gate.md" > /dev/null
echo "gate rows: $(grep -c '| pass |' "$OUT/accuracy_gate.md") pass, $(grep -c 'FAIL' "$OUT/accuracy_gate.md") fail"
start=$(date +%s)
timeout "$(left 60)" python3 -m hpcsolve.cli bench lbm --quick --out "$OUT" > /tmp/bench_lbm.txt 2>&1
echo "bench lbm rc $? in $(( $(date +%s) - start )) s"
start=$(date +%s)
timeout "$(left 40)" python3 -m hpcsolve.cli bench fem --quick --no-robustness --no-whole-run --out "$OUT" > /tmp/bench_fem.txt 2>&1
echo "bench fem rc $? in $(( $(date +%s) - start )) s"
tail -5 /tmp/bench_fem.txt
for f in "$OUT"/bench_lbm.md "$OUT"/bench_fem.md; do [ -f "$f" ] && head -30 "$f"; done
