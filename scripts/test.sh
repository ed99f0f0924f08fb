#!/usr/bin/env bash
# The test suite, as CI runs it (on the CPU): the main pytest process, then the Numba-CUDA kernels
# under the CUDA simulator in a process of their own (NUMBA_ENABLE_CUDASIM must be set before
# numba is imported), then the notebooks (nbmake). GPU tests (-m gpu) skip here; run them on a
# GPU machine with scripts/gpu_check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export MPLBACKEND=Agg
python -m pytest -m "not cudasim" "$@"
NUMBA_ENABLE_CUDASIM=1 python -m pytest -m cudasim "$@"
if compgen -G "notebooks/*.ipynb" > /dev/null; then
  python -m pytest --nbmake notebooks "$@"
fi
