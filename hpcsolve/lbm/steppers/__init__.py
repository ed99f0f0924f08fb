"""The LBM steppers, one per backend (NumPy reference, CuPy RawKernels, Numba-CUDA), their common GPU pieces and
the in-place (AA) streaming reference. Registered here with the backend registry (``Backend.piece``): the stepper
factory and the Bouzidi pre-pass of each backend."""

from hpcsolve.core.backends import register_piece

_PIECES = {
    "numpy": ("hpcsolve.lbm.steppers.kernels_numpy:make_stepper", "hpcsolve.lbm.boundaries.bouzidi:NumpyPrepass"),
    "cupy": ("hpcsolve.lbm.steppers.kernels_cupy:make_stepper", "hpcsolve.lbm.steppers.kernels_cupy:CupyBouzidi"),
    "numba-cuda": ("hpcsolve.lbm.steppers.kernels_numba:make_stepper",
                   "hpcsolve.lbm.steppers.kernels_numba:NumbaPrepass"),
}
for _backend, (_stepper, _prepass) in _PIECES.items():
    register_piece("lbm.stepper", _backend, _stepper)
    register_piece("lbm.bouzidi_prepass", _backend, _prepass)
