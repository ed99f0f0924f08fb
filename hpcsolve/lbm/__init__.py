"""Lattice-Boltzmann CFD (D2Q9) with fp64 / fp32 / 16-bit storage on NumPy, CuPy and Numba-CUDA.

Run an LBM case from Python with ``hpcsolve.run_case("cases/lid_driven_cavity.toml", ...)`` and read a written one
back with ``hpcsolve.load_result(folder)`` (fields of shape (ny, nx[, 2]) on ``result.grid``, a cell-centred
``hpcsolve.core.results.StructuredGrid``); this package holds the solver's parts and has no API of its own.
"""
