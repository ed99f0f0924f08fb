"""The FEM's linear algebra: the low-level op interface (``lowops``) and its three backends, the one CG, the
device matrix, the solve report, distributed CG, the preconditioners. Registered here with the backend registry
(``Backend.piece("fem.low_ops")``): each backend's low-level ops."""

from hpcsolve.core.backends import register_piece

for _backend, _module in (("numpy", "kernels_numpy_low"), ("cupy", "kernels_cupy"), ("numba-cuda", "kernels_numba")):
    register_piece("fem.low_ops", _backend, f"hpcsolve.fem.linalg.{_module}:low_ops")
