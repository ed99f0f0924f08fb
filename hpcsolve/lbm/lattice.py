"""D2Q9 lattice constants, defined once.

Direction numbering (x to the right = array axis 1, y up = array axis 0)::

    6   2   5
      \\ | /
    3 - 0 - 1
      / | \\
    7   4   8

Arrays of populations are shaped (9, ny, nx): direction first, then row (y), then column (x).
"""

from __future__ import annotations

import numpy as np

Q = 9
#: lattice velocities c_i = (CX[i], CY[i])
CX = (0, 1, 0, -1, 0, 1, -1, -1, 1)
CY = (0, 0, 1, 0, -1, 1, 1, -1, -1)
#: weights w_i as exact fractions (floats); use ``weights(dtype)`` for a typed array
WEIGHTS = (4.0 / 9.0,) + (1.0 / 9.0,) * 4 + (1.0 / 36.0,) * 4
#: OPPOSITE[i] is the direction with c = -c_i
OPPOSITE = (0, 3, 4, 1, 2, 7, 8, 5, 6)
#: TRT pairs (i, opposite(i)) with i < opposite(i); the rest direction 0 pairs with itself
TRT_PAIRS = ((1, 3), (2, 4), (5, 7), (6, 8))
#: lattice speed of sound squared, c_s^2 = 1/3 (lattice units)
CS2 = 1.0 / 3.0


def weights(dtype=np.float64) -> np.ndarray:
    return np.array(WEIGHTS, dtype=dtype)


def velocities() -> np.ndarray:
    """(9, 2) int array of (c_x, c_y)."""
    return np.array(list(zip(CX, CY)), dtype=np.int64)


def _check() -> None:
    assert abs(sum(WEIGHTS) - 1.0) < 1e-15
    for i in range(Q):
        j = OPPOSITE[i]
        assert CX[j] == -CX[i] and CY[j] == -CY[i] and WEIGHTS[i] == WEIGHTS[j]


_check()
