"""The interpolated bounce-back pre-pass as two list kernels of the kernel plan (``kernel_plan.ListKernel``), the
kernel piece of ``hpcsolve/lbm/boundaries/bouzidi.py`` (which holds the links, their weights, the NumPy pre-pass and
the force term, and re-exports these two). They live in the kernel room, below the boundaries, because both emitters
print them (``emit_cuda.bouzidi_source``, ``emit_numba.bouzidi_source``) and the kernel room imports no boundary
module."""

from __future__ import annotations

from hpcsolve.lbm.kernels.kernel_plan import ListKernel, Op

#: the pre-pass's two list kernels (``kernel_plan.ListKernel``), emitted by both GPU backends: every link value
#: is gathered into V (storage dtype) before the scatter writes any slot, as ``bouzidi.prepass`` requires
GATHER = ListKernel(
    "bouzidi_gather", "interpolated bounce-back pre-pass, gather: V[k] = a h[slot] + b h[partner] (bouzidi.prepass)",
    (("A", "pop_in"), ("slot", "index"), ("partner", "index"), ("a", "real"), ("b", "real"), ("V", "pop")),
    (Op("load", out=("hn",), args=("A", "slot[k]")), Op("load", out=("hf",), args=("A", "partner[k]")),
     Op("physics", "interpolated_bounce_back", ("v",), ("hn", "hf", "a[k]", "b[k]")),
     Op("store", args=("V", "k", "v"))))
SCATTER = ListKernel(
    "bouzidi_scatter", "interpolated bounce-back pre-pass, scatter: the gathered link values into their slots",
    (("A", "pop"), ("slot", "index"), ("V", "pop_in")), (Op("copy", args=("A", "slot[k]", "V", "k")),))
