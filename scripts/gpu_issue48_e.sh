#!/usr/bin/env bash
# Device call 5 for issue 48 (2026-12-07, second session), on the code to submit: the copy bandwidth, every GPU test
# (the accuracy gate included, against its baseline) with the gate's table, then `bench lbm` (default sizes) and
# `bench fem` (the default iteration table, multigrid at 2047 only, without the robustness and whole-run tables).
#   device run: bash scripts/gpu_issue48_e.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export PYTHONPATH=/tmp/site:$PWD HPCSOLVE_GATE_OUT=$OUT/accuracy_gate.jsonl
END=$(( $(date +%s) + ${BUDGET_S:-580} ))              # the whole call ends by then
left() { local l=$(( END - $(date +%s) )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
start=$(date +%s)
timeout "$(left 330)" python3 -m pytest -m gpu -v -p no:cacheprovider -W ignore::Warning -rfE -n 4 --durations=10 tests > "$OUT/pytest_gpu.txt" 2>&1
echo "pytest -m gpu rc $? in $(( $(date +%s) - start )) s"
grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -1
echo "per-test lines: $(grep -c ' PASSED ' "$OUT/pytest_gpu.txt") passed, $(grep -c ' FAILED ' "$OUT/pytest_gpu.txt") failed, $(grep -c ' SKIPPED ' "$OUT/pytest_gpu.txt") skipped"
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
python3 scripts/accuracy_gate.py "$OUT/accuracy_gate.jsonl" --out "$OUT/accuracy_gate.md" > /dev/null
echo "gate rows: $(grep -c '| pass |' "$OUT/accuracy_gate.md") pass, $(grep -c 'FAIL' "$OUT/accuracy_gate.md") fail"
cat "$OUT/accuracy_gate.md" | head -60
start=$(date +%s)
timeout "$(left 140)" python3 -m hpcsolve.cli bench lbm --out "$OUT" > "$OUT/bench_lbm.log" 2>&1
echo "bench lbm rc $? in $(( $(date +%s) - start )) s"
start=$(date +%s)
timeout "$(left 120)" python3 -m hpcsolve.cli bench fem --mg-sizes 2047 --no-robustness --no-whole-run --out "$OUT" > "$OUT/bench_fem.log" 2>&1
echo "bench fem rc $? in $(( $(date +%s) - start )) s"
tail -3 "$OUT/bench_fem.log"
for f in "$OUT"/bench_lbm.md "$OUT"/bench_fem.md; do [ -f "$f" ] && head -40 "$f"; done
