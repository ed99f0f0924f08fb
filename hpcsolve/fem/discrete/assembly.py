"""Vectorized P1 assembly (no Python loop over elements) into SciPy CSR with int32 indices.

Scalar: stiffness of -div(k grad u) with k constant per triangle, mass, load (3-point edge-midpoint
rule, exact for quadratics). Elasticity: plane strain / plane stress, two unknowns per node,
interleaved (u_x of node i is DOF 2i, u_y is 2i+1). Edge loads (Neumann). Dirichlet conditions
by condensation: the free-DOF block is SPD, and the fixed values are lifted into the right side.

The element kernels (``_gradients``, ``stiffness_local``, ``elasticity_local``, ``load``) are array-module
generic: given a mesh whose points and triangles are CuPy arrays (``hpcsolve.fem.discrete.device.DeviceMesh``)
they run on the device; only ``_to_csr`` and ``condense`` are SciPy (the device has its own in ``device``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from hpcsolve.core.backends import get_array_module
from hpcsolve.fem.discrete.mesh import Mesh


def _gradients(mesh: Mesh) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Area (m,) and barycentric gradients d lambda_i / dx (m, 3), d lambda_i / dy (m, 3)."""
    p = mesh.points[mesh.triangles]                  # (m, 3, 2), one gather
    xp = get_array_module(p)
    x0, x1, x2 = p[:, 0, 0], p[:, 1, 0], p[:, 2, 0]
    y0, y1, y2 = p[:, 0, 1], p[:, 1, 1], p[:, 2, 1]
    dy = xp.stack([y1 - y2, y2 - y0, y0 - y1], axis=1)
    dx = xp.stack([x2 - x1, x0 - x2, x1 - x0], axis=1)
    det = x0 * dy[:, 0] + x1 * dy[:, 1] + x2 * dy[:, 2]
    inv = (1.0 / det)[:, None]
    return 0.5 * det, dy * inv, dx * inv


def _to_csr(dofs: np.ndarray, local: np.ndarray, n: int) -> sp.csr_matrix:
    """Sum element matrices local (m, k, k) over element DOF lists dofs (m, k) into CSR (int32)."""
    k = dofs.shape[1]
    idx = dofs.astype(np.int32, copy=False)
    rows = np.repeat(idx, k, axis=1).ravel()
    cols = np.tile(idx, (1, k)).ravel()
    A = sp.csr_matrix((local.ravel(), (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    if A.indices.dtype != np.int32:
        A.indices = A.indices.astype(np.int32)
        A.indptr = A.indptr.astype(np.int32)
    return A


def stiffness_local(mesh: Mesh, conductivity=1.0):
    """(element DOFs (m, 3), element matrices (m, 3, 3)) of the stiffness: w grad phi_i . grad phi_j with
    w = k_T |T|; conductivity a number or one value per triangle (an array of the mesh's module)."""
    area, bx, by = _gradients(mesh)
    w = (area * conductivity)[:, None, None]
    local = (bx[:, :, None] * bx[:, None, :] + by[:, :, None] * by[:, None, :]) * w
    return mesh.triangles, local


def stiffness(mesh: Mesh, conductivity: float | np.ndarray = 1.0) -> sp.csr_matrix:
    """K_ij = sum_T k_T |T| grad phi_i . grad phi_j; conductivity scalar or one value per triangle."""
    dofs, local = stiffness_local(mesh, conductivity)
    return _to_csr(dofs, local, mesh.n_points)


def stiffness_tensor(mesh: Mesh, K) -> sp.csr_matrix:
    """K_ij = sum_T |T| grad phi_i . (K_T grad phi_j) for a symmetric positive definite 2x2 tensor K (one, or
    one per triangle: shape (m, 2, 2)), e.g. anisotropic diffusion."""
    area, bx, by = _gradients(mesh)
    Kt = np.broadcast_to(np.asarray(K, dtype=np.float64), (len(area), 2, 2))
    G = np.stack([bx, by], axis=2)                      # (m, 3, 2)
    local = np.einsum("eia,eab,ejb->eij", G, Kt, G, optimize=True) * area[:, None, None]
    return _to_csr(mesh.triangles, local, mesh.n_points)


_MASS_REF = (np.ones((3, 3)) + np.eye(3)) / 12.0


def mass(mesh: Mesh) -> sp.csr_matrix:
    area = mesh.areas()
    local = area[:, None, None] * _MASS_REF[None]
    return _to_csr(mesh.triangles, local, mesh.n_points)


def load(mesh: Mesh, source) -> np.ndarray:
    """b_i = int f phi_i; source is a number or a vectorized callable f(x, y)."""
    area = mesh.areas()
    t = mesh.triangles
    xp = get_array_module(area)
    if callable(source):
        p = mesh.points[t]                                   # (m, 3, 2)
        mids = 0.5 * (p + p[:, [1, 2, 0]])                  # midpoints of edges 01, 12, 20
        f = source(mids[..., 0], mids[..., 1])              # (m, 3)
        # phi_0 is 1/2 at midpoints 01 and 20, 0 at 12; 3-point rule weight |T|/3
        local = xp.stack([f[:, 0] + f[:, 2], f[:, 0] + f[:, 1], f[:, 1] + f[:, 2]], axis=1) * (area / 6.0)[:, None]
    else:
        local = xp.repeat((float(source) * area / 3.0)[:, None], 3, axis=1)
    return xp.bincount(t.ravel(), weights=local.ravel(), minlength=mesh.n_points)


def elasticity_matrix(young: float, poisson: float, model: str) -> np.ndarray:
    """D in sigma = D eps (Voigt: xx, yy, xy with engineering shear)."""
    E, nu = float(young), float(poisson)
    if model == "plane_strain":
        c = E / ((1 + nu) * (1 - 2 * nu))
        return c * np.array([[1 - nu, nu, 0], [nu, 1 - nu, 0], [0, 0, (1 - 2 * nu) / 2]])
    if model == "plane_stress":
        c = E / (1 - nu * nu)
        return c * np.array([[1, nu, 0], [nu, 1, 0], [0, 0, (1 - nu) / 2]])
    raise ValueError(f"model: {model!r}; allowed: plane_strain, plane_stress")


def _strain_operator(bx: np.ndarray, by: np.ndarray) -> np.ndarray:
    """B (m, 3, 6): Voigt strain from the interleaved element DOFs."""
    m = len(bx)
    B = get_array_module(bx).zeros((m, 3, 6))
    B[:, 0, 0::2] = bx
    B[:, 1, 1::2] = by
    B[:, 2, 0::2] = by
    B[:, 2, 1::2] = bx
    return B


def elasticity_dofs(mesh: Mesh) -> np.ndarray:
    t = mesh.triangles.astype(np.int64)
    return get_array_module(t).stack([2 * t[:, 0], 2 * t[:, 0] + 1, 2 * t[:, 1], 2 * t[:, 1] + 1, 2 * t[:, 2], 2 * t[:, 2] + 1], axis=1)


def elasticity_local(mesh: Mesh, young, poisson: float, model: str, thickness: float = 1.0):
    """(element DOFs (m, 6), element matrices (m, 6, 6)) t |T| E_T B^T D(1) B; young a number or one value per
    triangle (an array of the mesh's module)."""
    area, bx, by = _gradients(mesh)
    xp = get_array_module(area)
    B = _strain_operator(bx, by)
    D = xp.asarray(elasticity_matrix(1.0, poisson, model))
    w = thickness * area * young
    local = xp.matmul(B.transpose(0, 2, 1), xp.matmul(D, B)) * w[:, None, None]
    return elasticity_dofs(mesh), local


def elasticity_stiffness(mesh: Mesh, young: float | np.ndarray, poisson: float, model: str,
                         thickness: float = 1.0) -> sp.csr_matrix:
    """K = sum_T t |T| B^T D B; young scalar or one value per triangle."""
    dofs, local = elasticity_local(mesh, young, poisson, model, thickness)
    return _to_csr(dofs, local, 2 * mesh.n_points)


def stress(mesh: Mesh, u: np.ndarray, young, poisson: float, model: str) -> np.ndarray:
    """Voigt stress (m, 3) per triangle from nodal displacements u (n, 2)."""
    area, bx, by = _gradients(mesh)
    B = _strain_operator(bx, by)
    ue = u.reshape(-1)[elasticity_dofs(mesh)]
    eps = np.einsum("eij,ej->ei", B, ue)
    D = elasticity_matrix(1.0, poisson, model)
    return (eps @ D.T) * np.broadcast_to(np.asarray(young, dtype=np.float64), area.shape)[:, None]


def edge_lengths(mesh: Mesh, edges: np.ndarray) -> np.ndarray:
    d = mesh.points[edges[:, 1]] - mesh.points[edges[:, 0]]
    return np.sqrt((d ** 2).sum(-1))


def edge_load(mesh: Mesh, edges: np.ndarray, value: float | np.ndarray, ncomp: int = 1) -> np.ndarray:
    """Nodal loads of a constant flux / traction (per unit length) on the given boundary edges."""
    L = edge_lengths(mesh, edges)
    value = np.atleast_1d(np.asarray(value, dtype=np.float64))
    out = np.zeros(mesh.n_points * ncomp)
    for c in range(ncomp):
        w = np.repeat((value[c] * L / 2.0)[:, None], 2, axis=1)
        out[c::ncomp] += np.bincount(edges.ravel(), weights=w.ravel(), minlength=mesh.n_points)
    return out


def condense(A: sp.csr_matrix, b: np.ndarray, fixed: np.ndarray, values: np.ndarray):
    """Dirichlet by condensation: returns (A_ff, b_f - A_fd u_d, free DOF indices)."""
    n = A.shape[0]
    is_fixed = np.zeros(n, dtype=bool)
    is_fixed[fixed] = True
    free = np.flatnonzero(~is_fixed)
    ud = np.zeros(n)
    ud[fixed] = values
    rhs = b - A @ ud
    Aff = A[free][:, free].tocsr()
    Aff.sort_indices()
    if Aff.indices.dtype != np.int32 and Aff.nnz < 2**31 - 1:
        Aff.indices = Aff.indices.astype(np.int32)
        Aff.indptr = Aff.indptr.astype(np.int32)
    return Aff, rhs[free], free


def expand(x_free: np.ndarray, free: np.ndarray, fixed: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    u = np.zeros(n)
    u[fixed] = values
    u[free] = x_free
    return u
