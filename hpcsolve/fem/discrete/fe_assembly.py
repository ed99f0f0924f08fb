"""Element-generic assembly by quadrature on affine simplices: any :class:`Element` of
:mod:`hpcsolve.fem.discrete.elements` (P1/P2 triangles and tetrahedra) on a :class:`SimplexMesh` with its
:class:`DofMap`.

Every kernel is vectorized over the cells and array-module generic (``xp`` from the mesh's arrays: NumPy, or CuPy for
a mesh whose points, cells and DOF maps are device arrays): gathers, arithmetic, ``einsum``, ``matmul`` and
``bincount`` only. The reference basis is evaluated once per call at the rule's points; the physical gradients are
the reference ones times the inverse Jacobian, constant per cell. Only :func:`to_csr` builds a SciPy matrix.

Vector fields (elasticity) interleave their components: component c of scalar DOF i is ``ncomp * i + c``, as in
:mod:`hpcsolve.fem.discrete.assembly`.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp

from hpcsolve.core.backends import get_array_module, to_host
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete import assembly
from hpcsolve.fem.discrete.elements import Element, quadrature, reference_volume
from hpcsolve.fem.discrete.simplex import DofMap, SimplexMesh
from hpcsolve.fem.linalg.precond import aggregation

#: Voigt order of the strain components (pairs of axes): 2D xx, yy, xy; 3D xx, yy, zz, yz, xz, xy
VOIGT = {2: ((0, 0), (1, 1), (0, 1)), 3: ((0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1))}
#: the elasticity models of each dimension
MODELS = {2: ("plane_strain", "plane_stress"), 3: ("3d",)}


def _check(mesh: SimplexMesh, dm: DofMap, el: Element) -> None:
    if el.dim != mesh.dim or el.degree != dm.degree or dm.cell_dofs.shape[1] != el.n_local:
        raise CaseError.invalid("element", el.name, f"the element of the mesh's dimension ({mesh.dim}) and the DOF "
                                f"map's degree ({dm.degree})")


def geometry(mesh: SimplexMesh):
    """(inverse Jacobians (m, d, d), |det J| (m,)) of the affine maps from the reference simplex; the rows of J^-1
    are the cofactor columns over det J (2D: the rotated columns; 3D: cross products of the columns)."""
    J = mesh.jacobians()
    xp = get_array_module(J)
    if mesh.dim == 2:
        det = J[:, 0, 0] * J[:, 1, 1] - J[:, 0, 1] * J[:, 1, 0]
        adj = xp.stack([xp.stack([J[:, 1, 1], -J[:, 0, 1]], axis=1),
                        xp.stack([-J[:, 1, 0], J[:, 0, 0]], axis=1)], axis=1)
    else:
        c0, c1, c2 = J[:, :, 0], J[:, :, 1], J[:, :, 2]
        adj = xp.stack([xp.cross(c1, c2), xp.cross(c2, c0), xp.cross(c0, c1)], axis=1)
        det = (c0 * adj[:, 0]).sum(axis=1)
    return adj / det[:, None, None], xp.abs(det)


def _physical_gradients(jinv, ref_grad):
    """(m, q, k, d) gradients in x from reference gradients (q, k, d): d phi / dx_b = sum_a d phi / d xi_a J^-1_ab
    (one broadcast matmul: numpy's einsum of this took 4x as long on 663k tetrahedra)."""
    xp = get_array_module(jinv)
    return xp.matmul(ref_grad[None, :, :, :], jinv[:, None, :, :])


def _rule(mesh: SimplexMesh, el: Element, order: int):
    """Quadrature points, weights, basis values and reference gradients, in the mesh's array module."""
    xp = get_array_module(mesh.points)
    xi, w = quadrature(el.dim, order)
    return xp.asarray(xi), xp.asarray(w), xp.asarray(el.basis(xi)), xp.asarray(el.grad(xi))


def quadrature_points(mesh: SimplexMesh, xi):
    """(m, q, d) physical coordinates of the reference points xi (q, d) in every cell."""
    xp = get_array_module(mesh.points)
    p = mesh.points[mesh.cells]                                    # (m, d + 1, d)
    return p[:, :1, :] + xp.matmul(xi[None], p[:, 1:, :] - p[:, :1, :])


def _weighted_products(left, right, w):
    """(m, i, j) sum_q w_q left[e, q, :, i] . right[e, q, :, j] for left (m, q, r, i), right (m, q, r, j), by one
    batched matmul over the (q, r) pairs."""
    xp = get_array_module(left)
    m, q, r, i = left.shape
    lw = (left * w[None, :, None, None]).reshape(m, q * r, i)
    return xp.matmul(lw.transpose(0, 2, 1), right.reshape(m, q * r, right.shape[-1]))


def stiffness_local(mesh: SimplexMesh, dm: DofMap, el: Element, coefficient=1.0):
    """(cell DOFs (m, k), element matrices (m, k, k)) of -div(c grad u): |det J| c sum_q w_q grad phi_i .
    grad phi_j, exact for affine cells (order 2 (degree - 1)); c a number or one value per cell."""
    _check(mesh, dm, el)
    jinv, det = geometry(mesh)
    _, w, _, ref_grad = _rule(mesh, el, 2 * (el.degree - 1))
    G = _physical_gradients(jinv, ref_grad).transpose(0, 1, 3, 2)      # (m, q, d, k)
    local = _weighted_products(G, G, w)
    return dm.cell_dofs, local * (det * coefficient)[:, None, None]


def mass_local(mesh: SimplexMesh, dm: DofMap, el: Element, coefficient=1.0):
    """(cell DOFs (m, k), element matrices (m, k, k)) of the mass: |det J| c sum_q w_q phi_i phi_j, exact (order
    2 degree); c a number or one value per cell."""
    _check(mesh, dm, el)
    _, det = geometry(mesh)
    _, w, phi, _ = _rule(mesh, el, 2 * el.degree)
    reference = (phi.T * w) @ phi
    return dm.cell_dofs, reference[None] * (det * coefficient)[:, None, None]


def load(mesh: SimplexMesh, dm: DofMap, el: Element, f, order: int | None = None):
    """b_i = int f phi_i, assembled (n_dofs,); f a number (integrated exactly) or a vectorized callable f(x, y[, z])
    of (m, q) coordinate arrays, integrated by a rule of ``order`` (default 2 degree: the error it adds is of the
    order of the element's own; the measured orders of tests/fem/discrete/test_fe_assembly.py hold with it)."""
    _check(mesh, dm, el)
    _, det = geometry(mesh)
    xp = get_array_module(det)
    if callable(f):
        xi, w, phi, _ = _rule(mesh, el, 2 * el.degree if order is None else order)
        X = quadrature_points(mesh, xi)
        values = f(*[X[..., a] for a in range(mesh.dim)])
        local = ((values * w[None]) @ phi) * det[:, None]
    else:
        _, w, phi, _ = _rule(mesh, el, el.degree)
        local = (w @ phi)[None, :] * (float(f) * det)[:, None]
    return xp.bincount(dm.cell_dofs.ravel(), weights=local.ravel(), minlength=dm.n_dofs)


def elasticity_matrix(dim: int, poisson: float, model: str, young: float = 1.0) -> np.ndarray:
    """D in sigma = D eps (Voigt order of ``VOIGT``, engineering shear strains). 2D: plane strain / plane stress
    (:func:`assembly.elasticity_matrix`); 3D ("3d"): isotropic, lambda = E nu / ((1 + nu)(1 - 2 nu)),
    mu = E / (2 (1 + nu))."""
    if model not in MODELS.get(dim, ()):
        raise CaseError.invalid("model", model, f"in {dim}D: {', '.join(MODELS.get(dim, ()))}")
    if dim == 2:
        return assembly.elasticity_matrix(young, poisson, model)
    E, nu = float(young), float(poisson)
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    D = np.zeros((6, 6))
    D[:3, :3] = lam
    D[np.arange(3), np.arange(3)] += 2 * mu
    D[np.arange(3, 6), np.arange(3, 6)] = mu
    return D


def strain_operator(G):
    """B (..., n_voigt, k d) from physical gradients G (..., k, d): the Voigt strain of the interleaved element
    DOFs (component c of local node i is column d i + c)."""
    xp = get_array_module(G)
    *lead, k, d = G.shape
    B = xp.zeros((*lead, len(VOIGT[d]), k, d))
    for row, (a, b) in enumerate(VOIGT[d]):
        B[..., row, :, a] = G[..., :, b]
        if a != b:
            B[..., row, :, b] = G[..., :, a]
    return B.reshape(*lead, len(VOIGT[d]), k * d)


def elasticity_dofs(dm: DofMap, ncomp: int) -> np.ndarray:
    """(m, k ncomp) interleaved vector DOFs of every cell: ncomp i + c for local node i, component c."""
    xp = get_array_module(dm.cell_dofs)
    cd = dm.cell_dofs.astype(xp.int64)
    return (ncomp * cd[:, :, None] + xp.arange(ncomp)[None, None, :]).reshape(cd.shape[0], -1)


def elasticity_local(mesh: SimplexMesh, dm: DofMap, el: Element, young, poisson: float, model: str,
                     thickness: float = 1.0):
    """(vector cell DOFs (m, k d), element matrices (m, k d, k d)) of |det J| E sum_q w_q B^T D(1) B (times the
    thickness in 2D); young a number or one value per cell; model plane_strain / plane_stress (2D) or 3d."""
    _check(mesh, dm, el)
    jinv, det = geometry(mesh)
    xp = get_array_module(det)
    D = xp.asarray(elasticity_matrix(mesh.dim, poisson, model))
    _, w, _, ref_grad = _rule(mesh, el, 2 * (el.degree - 1))
    B = strain_operator(_physical_gradients(jinv, ref_grad))             # (m, q, nv, k d)
    local = _weighted_products(B, xp.matmul(D, B), w)
    scale = det * young * (thickness if mesh.dim == 2 else 1.0)
    return elasticity_dofs(dm, mesh.dim), local * scale[:, None, None]


def to_csr(dofs, local, n: int) -> sp.csr_matrix:
    """Sum element matrices into a SciPy CSR matrix with int32 indices (on the host)."""
    return assembly._to_csr(to_host(dofs), to_host(local), n)


def stiffness(mesh: SimplexMesh, dm: DofMap, el: Element, coefficient=1.0) -> sp.csr_matrix:
    return to_csr(*stiffness_local(mesh, dm, el, coefficient), dm.n_dofs)


def mass(mesh: SimplexMesh, dm: DofMap, el: Element, coefficient=1.0) -> sp.csr_matrix:
    return to_csr(*mass_local(mesh, dm, el, coefficient), dm.n_dofs)


def elasticity_stiffness(mesh: SimplexMesh, dm: DofMap, el: Element, young, poisson: float, model: str,
                         thickness: float = 1.0) -> sp.csr_matrix:
    dofs, local = elasticity_local(mesh, dm, el, young, poisson, model, thickness)
    return to_csr(dofs, local, mesh.dim * dm.n_dofs)


def _facet_selection(mesh: SimplexMesh, facets):
    """Indices into ``mesh.facets`` from a boolean mask over them or their indices (None: all)."""
    xp = get_array_module(mesh.facets)
    if facets is None:
        return xp.arange(mesh.facets.shape[0])
    sel = xp.asarray(facets)
    return xp.flatnonzero(sel) if sel.dtype == bool else sel


def facet_measures(mesh: SimplexMesh, facets=None):
    """(f,) length (2D) or area (3D) of the selected boundary facets (a boolean mask over ``mesh.facets``, their
    indices, or None for all)."""
    xp = get_array_module(mesh.points)
    p = mesh.points[mesh.facets[_facet_selection(mesh, facets)]]
    t1 = p[:, 1] - p[:, 0]
    if p.shape[2] == 2:
        return xp.sqrt((t1 * t1).sum(axis=1))
    n = xp.cross(t1, p[:, 2] - p[:, 0])
    return 0.5 * xp.sqrt((n * n).sum(axis=1))


def facet_load(mesh: SimplexMesh, dm: DofMap, el: Element, facets, value, ncomp: int = 1):
    """Assembled loads (n_dofs ncomp,) of a flux (ncomp 1) or traction per unit facet measure on the selected
    boundary facets (a boolean mask over ``mesh.facets`` or their indices), constant on each facet: ``value`` a
    number, one per component (ncomp,), or one row per selected facet (f, ncomp) (e.g. a pressure times each facet's
    normal). Exact integrals of the facet basis (P1: measure / d at each vertex; P2 segment: 1/6, 1/6, 2/3 of the
    length; P2 triangle: 0 at the vertices, 1/3 of the area at each edge)."""
    _check(mesh, dm, el)
    xp = get_array_module(mesh.points)
    sel = _facet_selection(mesh, facets)
    fel = el.facet()
    xi, w = quadrature(fel.dim, fel.degree)
    shares = xp.asarray(w @ fel.basis(xi) / reference_volume(fel.dim))            # (kf,), summing to 1
    local = facet_measures(mesh, sel)[:, None] * shares[None, :]                 # (f, kf)
    value = xp.asarray(value, dtype=xp.float64)
    if value.ndim <= 1:                                                           # the same on every facet
        value = xp.broadcast_to(value.reshape(-1), (ncomp,))[None, :]
    elif value.shape != (local.shape[0], ncomp):
        raise CaseError.invalid("value", f"shape {value.shape}", f"a number, ({ncomp},) or ({local.shape[0]}, "
                                f"{ncomp}): one row per selected facet")
    fd = dm.facet_dofs[sel].ravel()
    out = xp.zeros(dm.n_dofs * ncomp)
    for c in range(ncomp):
        out[c::ncomp] += xp.bincount(fd, weights=(value[:, c:c + 1] * local).ravel(), minlength=dm.n_dofs)
    return out


def _stack_exact(values, ncomp: int, gradient: bool):
    """The exact solution's values as (m, q, ncomp) or its gradient as (m, q, ncomp, d), from what the callables
    return: a scalar field's value array and its d gradient arrays, a vector field's ncomp of either."""
    xp = get_array_module(values if not isinstance(values, (tuple, list)) else values[0])
    if not gradient:
        return values[..., None] if ncomp == 1 else xp.stack(list(values), axis=-1)
    parts = [values] if ncomp == 1 else list(values)
    return xp.stack([xp.stack(list(g), axis=-1) for g in parts], axis=-2)


#: quadrature points per block of :func:`error_norms` (cells x rule points): bounds its temporaries (a few arrays of
#: this many (ncomp, d) values: ~100 MB at 2^22) whatever the mesh size
NORM_BLOCK_POINTS = 1 << 22


def error_norms(mesh: SimplexMesh, dm: DofMap, el: Element, u, exact, grad_exact, ncomp: int = 1,
                order: int | None = None, with_exact: bool = False):
    """(L2 error, H1-seminorm error) of the field u (n_dofs ncomp, interleaved) against an exact solution, by a rule
    of ``order`` (default 2 degree + 2); with ``with_exact`` also ||exact||_L2 by the same rule (what the L2 error is
    relative to: one pass, not two). exact(x, y[, z]) returns the value (ncomp 1) or a sequence of ncomp values;
    grad_exact the d partial derivatives (ncomp 1) or ncomp sequences of them. The cells go in blocks of
    ``NORM_BLOCK_POINTS`` quadrature points (the sums are float64 accumulations over blocks)."""
    _check(mesh, dm, el)
    xp = get_array_module(mesh.points)
    xi, w, phi, ref_grad = _rule(mesh, el, 2 * el.degree + 2 if order is None else order)
    uu = xp.asarray(u).reshape(-1, ncomp)
    step = max(1, NORM_BLOCK_POINTS // int(w.shape[0]))
    l2 = h1 = ex = 0.0
    for start in range(0, mesh.n_cells, step):
        part = dataclasses.replace(mesh, cells=mesh.cells[start:start + step])
        jinv, det = geometry(part)
        X = quadrature_points(part, xi)
        coords = [X[..., a] for a in range(mesh.dim)]
        ue = uu[dm.cell_dofs[start:start + step]]                              # (b, k, ncomp)
        uh = xp.matmul(phi[None], ue)                                          # (b, q, ncomp)
        # reference gradients of u_h first ((b, q, ncomp, d): k times fewer products than the physical gradients)
        ref = xp.matmul(ref_grad.transpose(0, 2, 1)[None], ue[:, None]).transpose(0, 1, 3, 2)
        gh = xp.matmul(ref, jinv[:, None])                                     # (b, q, ncomp, d)
        ue_x = _stack_exact(exact(*coords), ncomp, gradient=False)
        du = uh - ue_x
        dg = gh - _stack_exact(grad_exact(*coords), ncomp, gradient=True)
        l2 += xp.sum(det * ((du * du).sum(axis=2) @ w))
        h1 += xp.sum(det * ((dg * dg).sum(axis=(2, 3)) @ w))
        if with_exact:
            ex += xp.sum(det * ((ue_x * ue_x).sum(axis=2) @ w))
    out = (float(np.sqrt(float(l2))), float(np.sqrt(float(h1))))
    return out + (float(np.sqrt(float(ex))),) if with_exact else out


def rigid_body_modes(points):
    """(N d, 3) in 2D or (N d, 6) in 3D: the translations and rotations of the interleaved DOFs at points (N, d),
    the near-null space of elasticity (``hpcsolve.fem.linalg.precond.aggregation.rigid_body_modes``, one
    definition)."""
    return aggregation.rigid_body_modes(points)
