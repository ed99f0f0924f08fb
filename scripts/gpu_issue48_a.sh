#!/usr/bin/env bash
# Device call 1 of 2026-12-07 (issue 48): every GPU test with the new accuracy gate in record mode (its published
# bounds hold; no baseline yet), the gate's table and a baseline TOML from its values.
#   device run: bash scripts/gpu_issue48_a.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c "from hpcsolve.report.bandwidth import copy_bandwidth; print('copy bandwidth GB/s', round(copy_bandwidth('cupy')['bandwidth_GBps']))" 2>&1 | tail -1
export HPCSOLVE_GATE_RECORD=1 HPCSOLVE_GATE_OUT=$OUT/accuracy_gate.jsonl
start=$(date +%s)
timeout 540 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 --durations=25 tests > "$OUT/pytest_gpu.txt" 2>&1
echo "pytest -m gpu rc $? in $(( $(date +%s) - start )) s"
grep -E "passed|failed" "$OUT/pytest_gpu.txt" | tail -3
grep -E "^FAILED|^ERROR" "$OUT/pytest_gpu.txt" | head -20
grep -A27 "slowest" "$OUT/pytest_gpu.txt" | head -28
python3 scripts/accuracy_gate.py "$OUT/accuracy_gate.jsonl" --out "$OUT/accuracy_gate.md"
python3 scripts/accuracy_gate.py "$OUT/accuracy_gate.jsonl" --baseline --out "$OUT/accuracy_baseline_gpu.toml" > /dev/null
