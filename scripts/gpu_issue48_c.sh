#!/usr/bin/env bash
# Device call 3 of 2026-12-07 (issue 48): the accuracy gate against its baseline (the GPU gate tests alone), then
# `hpcsolve compare cases/cylinder_2d2.toml --backends cupy` with the crossings about the whole-cycle mean.
#   device run: bash scripts/gpu_issue48_c.sh   (carry: .whl)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONUNBUFFERED=1 MPLBACKEND=Agg OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
export PYTHONPATH=/tmp/site:$PWD HPCSOLVE_GATE_OUT=$OUT/accuracy_gate.jsonl
nvidia-smi --query-gpu=name --format=csv,noheader
start=$(date +%s)
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -W ignore::Warning -rfE -n 4 tests/test_accuracy_gate.py > "$OUT/pytest_gate.txt" 2>&1
echo "gate rc $? in $(( $(date +%s) - start )) s"; tail -4 "$OUT/pytest_gate.txt"
python3 scripts/accuracy_gate.py "$OUT/accuracy_gate.jsonl" --out "$OUT/accuracy_gate.md" | grep -c pass
grep FAIL "$OUT/accuracy_gate.md"
start=$(date +%s)
timeout 300 python3 -m hpcsolve.cli compare cases/cylinder_2d2.toml --backends cupy --out /tmp/cmp2d2 --quiet > "$OUT/compare_2d2.txt" 2>&1
echo "compare rc $? in $(( $(date +%s) - start )) s"
cp /tmp/cmp2d2/comparison.md /tmp/cmp2d2/comparison.json "$OUT/" 2>/dev/null
grep -E "^\| cupy|^Recommendation|^- cupy" "$OUT/compare_2d2.txt" | cut -c1-900
