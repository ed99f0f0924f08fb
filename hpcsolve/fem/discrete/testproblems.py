"""SPD systems for multigrid studies, benchmarks and tests: 2D Poisson (5-point and P1), rotated
anisotropic diffusion, coefficient jumps and plane-strain elasticity on Cook's membrane.

Each returns a :class:`Problem`: the free-DOF matrix (SciPy CSR, int32), a right-hand side, the
structured grid behind it (for geometric multigrid) and a near-null space (elasticity's rigid-body
modes, for smoothed aggregation). The right-hand side is random (standard normal, seeded), as in
``hpcsolve bench fem``: every error component is present, the hardest case for an iterative solver.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from hpcsolve.fem.discrete import assembly
from hpcsolve.fem.discrete import mesh as meshmod
from hpcsolve.fem.linalg.precond.aggregation import rigid_body_modes
from hpcsolve.fem.linalg.precond.geometric import StructuredGrid


@dataclass
class Problem:
    name: str
    A: sp.csr_matrix
    b: np.ndarray
    grid: StructuredGrid | None = None
    near_nullspace: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.A.shape[0]


def _rhs(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n)


def poisson_fd(m: int, seed: int = 1) -> Problem:
    """The 5-point Laplacian on m x m interior nodes (``hpcsolve bench fem``'s matrix; the P1 stiffness on
    right triangles), Dirichlet all round. Geometric multigrid needs m + 1 even (m = 2^k - 1 coarsens
    to the end)."""
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m), dtype=np.float64)
    I = sp.identity(m, dtype=np.float64)
    A = (sp.kron(I, T) + sp.kron(T, I)).tocsr()
    A = sp.csr_matrix((A.data, A.indices.astype(np.int32), A.indptr.astype(np.int32)), shape=A.shape)
    j, i = np.divmod(np.arange(m * m, dtype=np.int64), m)
    free = (j + 1) * (m + 2) + (i + 1)
    return Problem(f"poisson 5-point {m}^2", A, _rhs(m * m, seed), StructuredGrid(m + 1, m + 1, free))


def fd_grid(m: int) -> StructuredGrid:
    """The grid of :func:`poisson_fd` (or of ``kernels_cupy.poisson_5point_device(m)``) without the matrix."""
    return StructuredGrid(m + 1, m + 1, None)        # None: every interior node (built where it is used)


def _dirichlet_all(mesh, K, ncomp=1, seed=1, fixed_nodes=None) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    nodes = mesh.boundary_nodes() if fixed_nodes is None else fixed_nodes
    fixed = (nodes[:, None] * ncomp + np.arange(ncomp)[None, :]).ravel()
    A, _, free = assembly.condense(K, np.zeros(K.shape[0]), fixed, np.zeros(fixed.size))
    return A, _rhs(A.shape[0], seed), free


def poisson_p1(n: int, seed: int = 1) -> Problem:
    """P1 Poisson on the unit square, n x n cells, u = 0 on the boundary."""
    m = meshmod.rectangle(n, n)
    A, b, free = _dirichlet_all(m, assembly.stiffness(m), seed=seed)
    return Problem(f"poisson P1 {n}x{n}", A, b, StructuredGrid(n, n, free))


def anisotropic(n: int, epsilon: float = 1e-3, degrees: float = 30.0, seed: int = 1) -> Problem:
    """-div(K grad u) with K = R diag(1, epsilon) R^T rotated by ``degrees``: strong coupling along a
    direction that is not a grid line (hard for point smoothers and for geometric coarsening)."""
    m = meshmod.rectangle(n, n)
    t = math.radians(degrees)
    R = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    K = R @ np.diag([1.0, epsilon]) @ R.T
    A, b, free = _dirichlet_all(m, assembly.stiffness_tensor(m, K), seed=seed)
    return Problem(f"anisotropic eps={epsilon:g} {degrees:g} deg {n}x{n}", A, b, StructuredGrid(n, n, free))


def jumps(n: int, contrast: float = 1e6, blocks: int = 4, seed: int = 1) -> Problem:
    """Conductivity 1 and ``contrast`` on a blocks x blocks checkerboard (jumps across cell edges)."""
    m = meshmod.rectangle(n, n)
    c = m.points[m.triangles].mean(axis=1)
    ix = np.minimum((c[:, 0] * blocks).astype(int), blocks - 1)
    iy = np.minimum((c[:, 1] * blocks).astype(int), blocks - 1)
    k = np.where((ix + iy) % 2 == 0, 1.0, contrast)
    A, b, free = _dirichlet_all(m, assembly.stiffness(m, k), seed=seed)
    return Problem(f"jumps {contrast:g} {n}x{n}", A, b, StructuredGrid(n, n, free))


def cook(n: int, poisson_ratio: float = 0.3333333333333333, seed: int = 1) -> Problem:
    """Plane-strain elasticity on Cook's membrane (n x n cells), clamped at x = 0, random load: a solver test matrix,
    not the benchmark (cases/cook_membrane.toml: plane stress, shear load 1 on x = 48, u_y(48, 52) -> 23.96)."""
    m = meshmod.cook_membrane(n)
    K = assembly.elasticity_stiffness(m, 1.0, poisson_ratio, "plane_strain")
    left = np.flatnonzero(np.abs(m.points[:, 0]) <= 1e-12)
    A, b, free = _dirichlet_all(m, K, ncomp=2, seed=seed, fixed_nodes=left)
    return Problem(f"Cook plane strain {n}x{n}", A, b, StructuredGrid(n, n, free, ncomp=2),
                   rigid_body_modes(m.points, free))
