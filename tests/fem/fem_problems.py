"""Test problems for the FEM tests (imported by name: tests/fem is on sys.path under pytest)."""

import numpy as np
import scipy.sparse as sp


def poisson2d(N: int) -> sp.csr_matrix:
    """5-point Laplacian (unscaled) on N x N interior nodes; kappa = cot^2(pi / (2 (N + 1)))."""
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(N, N), dtype=np.float64)
    I = sp.identity(N, dtype=np.float64)
    return (sp.kron(I, T) + sp.kron(T, I)).tocsr()


def poisson2d_kappa(N: int) -> float:
    return float(np.sin(N * np.pi / (2 * (N + 1))) ** 2 / np.sin(np.pi / (2 * (N + 1))) ** 2)
