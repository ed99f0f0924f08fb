"""Markers keyed on where the tests run.

- ``gpu``: needs a real CUDA device (cupy or numba-cuda); skipped with the reason elsewhere.
- ``cudasim``: Numba-CUDA kernels under the CUDA simulator. They run only in a pytest process
  started with NUMBA_ENABLE_CUDASIM=1 (the variable must be set before numba is imported),
  see scripts/test.sh; in other processes they are skipped.
"""

import os

import matplotlib
import pytest

matplotlib.use("Agg")

SIM = os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def gpu_backends() -> list[str]:
    from hpcsolve import backends

    if SIM:
        return []
    return [n for n in ("cupy", "numba-cuda") if backends.probe(n).available]


def pytest_collection_modifyitems(config, items):
    from hpcsolve import backends

    usable = gpu_backends()
    reasons = "; ".join(f"{n}: {backends.probe(n).reason}" for n in ("cupy", "numba-cuda"))
    skip_gpu = pytest.mark.skip(reason=f"no usable GPU backend ({reasons})")
    skip_sim = pytest.mark.skip(reason="CUDA-simulator test: run with NUMBA_ENABLE_CUDASIM=1 -m cudasim (scripts/test.sh)")
    for item in items:
        if "gpu" in item.keywords and not usable:
            item.add_marker(skip_gpu)
        if "cudasim" in item.keywords and not SIM:
            item.add_marker(skip_sim)


@pytest.fixture
def gpu_backend_names():
    return gpu_backends()
