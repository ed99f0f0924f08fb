"""Memory a run needs, from the case alone, before anything is allocated.

Each estimate is the peak resident memory of the process (host RSS) and, on a GPU, the peak device
memory the run allocates, as

    base (interpreter, libraries, CUDA context) + bytes per cell / per triangle x size,

where the bytes per cell or triangle count the arrays each backend holds at its peak (named below)
and the temporaries of the NumPy expressions are a measured multiple of them. The coefficients
were measured with ``scripts/memory_estimates.py`` (estimate vs measured peak, several sizes; the
table is in docs/design/reliability.md); the estimates are meant to be within 20 % of the measured peak.
A run that does not fit is refused before it allocates, naming the case field to reduce.

This module holds what the families share (:class:`MemoryEstimate`, :func:`describe`); each family's estimate
and its measured coefficients live in its own package: ``hpcsolve.lbm.memory``, ``hpcsolve.fem.memory``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field


MiB = 2**20

#: matplotlib and the figures of the plots (drawn on at most 1000 x 1000 cells)
PLOT_BYTES = 48 * MiB


#: resident size the GPU libraries add to a CPU run that imported them: ``--backend auto`` probes cupy, then
#: numba.cuda (``hpcsolve.core.backends.resolve``), before it settles on numpy. Measured as VmRSS before and after
#: ``backends.resolve("auto")`` once ``hpcsolve.run`` is imported (2-core development machine, no GPU, cupy not
#: installed: the probe imports numba and numba.cuda): numba 58 MiB, numba.cuda 39 MiB more (97 MiB in all; the
#: issue's LBM fp64 resolution 500 run measured 100 MiB more with ``auto`` than with ``numpy``). cupy's import was
#: not measured (not installed there): where a probe loads it, it is not counted.
GPU_IMPORT_BYTES = {"numba": 58 * MiB, "numba.cuda": 39 * MiB}


def gpu_import_bytes(modules=None) -> int:
    """Resident bytes of the GPU libraries loaded in this process (``modules``: names loaded, default
    ``sys.modules``). The estimate of a run is made once its backend is resolved, so a CPU run whose ``auto``
    probe imported them counts them, one with ``--backend numpy`` (which imports neither) does not."""
    loaded = sys.modules if modules is None else modules
    return sum(size for name, size in GPU_IMPORT_BYTES.items() if name in loaded)


@dataclass(frozen=True)
class MemoryEstimate:
    host_bytes: int              # peak resident memory of the process
    device_bytes: int | None     # peak device memory allocated by the run (GPU backends), else None
    reduce: str                  # the case field to reduce when it does not fit
    basis: str                   # what the estimate counts, in one line
    items: dict = field(default_factory=dict)   # host terms by name (bytes), as counted in host_bytes

    def summary(self) -> dict:
        out = {"host_memory_bytes": self.host_bytes, "memory_reduce_field": self.reduce}
        if self.device_bytes is not None:
            out["device_memory_bytes"] = self.device_bytes
        return out


def case_plots(case) -> bool:
    output = getattr(case, "output", None)
    return bool(getattr(output, "plots", True))


def describe(estimate: MemoryEstimate) -> str:
    """One line for `hpcsolve validate` / `--dry-run`."""
    text = f"{estimate.host_bytes / 2**30:.2f} GiB host"
    if estimate.device_bytes is not None:
        text += f", {estimate.device_bytes / 2**30:.2f} GiB device"
    return f"{text} ({estimate.basis})"
