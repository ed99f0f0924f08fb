#!/usr/bin/env bash
# Run tests beside busy processes: the suite's "load-proof" check (docs/design/testing.md).
#
#   bash scripts/load_check.sh [-b BUSY] [-r REPEATS] [PYTEST ARGS ...]
#
# Starts BUSY (default 4) processes that only spin, runs `python -m pytest -n 0 -p no:cacheprovider -q PYTEST ARGS`
# REPEATS (default 3) times beside them, and stops them again on every exit (an error, Ctrl-C included). Each repeat
# prints the load average, pytest's last line and the failed tests; the exit status is the number of failed repeats.
# Without PYTEST ARGS it runs the tests that once depended on the machine's speed (the list below).
set -u
busy=4
repeats=3
while getopts "b:r:" opt; do
    case $opt in
        b) busy=$OPTARG ;;
        r) repeats=$OPTARG ;;
        *) echo "usage: bash scripts/load_check.sh [-b BUSY] [-r REPEATS] [PYTEST ARGS ...]" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
if [ $# -eq 0 ]; then
    set -- tests/lbm/test_steady_stop_prediction.py tests/core/test_signals.py \
        "tests/report/test_compare_generated.py::test_generated_concurrent_and_interrupted_comparisons[0]" \
        "tests/lbm/test_estimate_extrapolation.py::test_a_copy_stopped_early_predicts_the_stop_of_the_copy_run_to_the_end" \
        "tests/test_run.py::test_dry_run_predicts_the_steady_stop_of_the_run"
fi
python=${PYTHON:-python}
cd "$(dirname "$0")/.." || exit 2

pids=()
tests_pid=""
stop_busy() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
    pids=()
}
# pytest runs in the background and the script waits for it, so a signal stops everything at once
trap stop_busy EXIT
trap '[ -n "$tests_pid" ] && kill "$tests_pid" 2>/dev/null; stop_busy; exit 130' INT TERM
for _ in $(seq 1 "$busy"); do
    "$python" -c 'while True: pass' &
    pids+=($!)
done

failed=0
log=$(mktemp)
for r in $(seq 1 "$repeats"); do
    echo "repeat $r of $repeats beside $busy busy processes (load average $(cut -d' ' -f1 /proc/loadavg))"
    "$python" -m pytest -n 0 -p no:cacheprovider -q -rf "$@" >"$log" 2>&1 &
    tests_pid=$!
    wait "$tests_pid" || failed=$((failed + 1))
    tests_pid=""
    grep -E "^FAILED|^ERROR" "$log"
    tail -n 1 "$log"
done
rm -f "$log"
echo "load check: $failed of $repeats repeats failed"
exit "$failed"
