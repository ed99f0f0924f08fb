#!/usr/bin/env bash
# The test suite, as CI runs it (on the CPU), in three stages: the main pytest process, the Numba-CUDA kernels
# under the CUDA simulator in processes of their own (NUMBA_ENABLE_CUDASIM must be set before numba is
# imported), then the notebooks (nbmake). Every stage runs even when an earlier one failed; the end lists each
# stage's result and time, and the exit status is non-zero if any stage failed. Tests run on every core
# (pytest-xdist, -n auto); GPU tests (-m gpu) skip here: run them on a GPU machine with scripts/gpu_check.sh.
# The Examples sections of the public API's docstrings run in the main stage (tests/test_doctests.py).
#
#   bash scripts/test.sh                  the default suite (what CI runs; about 10 minutes on 2 cores)
#   bash scripts/test.sh --slow           the long validation runs and soaks (-m slow), no notebooks
#   bash scripts/test.sh [--slow] ARGS    extra pytest arguments for every stage (e.g. -x, -k cavity, -n 0)
set -uo pipefail
cd "$(dirname "$0")/.."
export MPLBACKEND=Agg PYTHONHASHSEED=0

select="not slow"
notebooks=1
if [ "${1:-}" = "--slow" ]; then
  select="slow"
  notebooks=0
  shift
fi

names=()
results=()
times=()
failed=0

stage() {   # stage NAME COMMAND...: run it, keep its result and time
  local name=$1 start end code
  shift
  echo "=== $name: $*"
  start=$(date +%s)
  "$@"
  code=$?
  end=$(date +%s)
  # pytest's 5 is 'no tests collected': a selection that has none in this stage is no failure
  if [ "$code" -eq 0 ] || [ "$code" -eq 5 ]; then
    results+=("passed")
  else
    results+=("FAILED (exit $code)")
    failed=1
  fi
  names+=("$name")
  times+=("$((end - start)) s")
}

stage "main" python -m pytest -n auto -m "not cudasim and not gpu and $select" "$@"
stage "cuda simulator" env NUMBA_ENABLE_CUDASIM=1 python -m pytest -n auto -m "cudasim and $select" "$@"
if [ "$notebooks" = 1 ] && compgen -G "notebooks/*.ipynb" > /dev/null; then
  # one notebook at a time: kernels started side by side race for their TCP ports (jupyter_client picks free ports,
  # then the kernel binds them; seen: "ZMQError: Address already in use", "Kernel died before replying to kernel_info")
  stage "notebooks" python -m pytest -n 0 --nbmake notebooks "$@"
fi

echo
echo "=== stages"
for i in "${!names[@]}"; do
  printf '%-16s %-22s %s\n' "${names[$i]}" "${results[$i]}" "${times[$i]}"
done
passed=0
for r in "${results[@]}"; do [ "$r" = "passed" ] && passed=$((passed + 1)); done
echo "stages: $passed passed, $(( ${#results[@]} - passed )) failed"
exit "$failed"
