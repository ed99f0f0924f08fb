"""The LBM kernel plan and what is generated from it: the CUDA C and Numba emitters, the population loads/stores per precision, the cell hash of stochastic rounding."""
