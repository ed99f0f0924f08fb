"""Fixtures shared by the FEM tests."""

import numpy as np
import pytest

from fem_problems import poisson2d


@pytest.fixture(scope="session")
def poisson128():
    """N = 128 (16,384 unknowns, kappa ~ 6.7e3) with a random exact solution."""
    A = poisson2d(128)
    rng = np.random.default_rng(1234)
    b = A @ rng.standard_normal(A.shape[0])
    return A, b
