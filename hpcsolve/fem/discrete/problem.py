"""From an FEMCase to a linear system: mesh, predicate selections, assembly, boundary conditions;
and the error norms against a manufactured solution."""

from __future__ import annotations

import time

import numpy as np
import scipy.sparse as sp

from hpcsolve.core import backends
from hpcsolve.core.backends import get_array_module, to_host
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete import assembly, device
from hpcsolve.fem.discrete.common import MANUFACTURED, Discrete, collect_fixed, select_boundary, triangle_mesh
from hpcsolve.fem.discrete.common import coefficient_per_cell as common_coefficient
from hpcsolve.fem.discrete.common import coord_mask as _coord_mask
from hpcsolve.fem.discrete.common import dirichlet_values as _dirichlet_values
from hpcsolve.fem.discrete.common import where_tags as _tags
from hpcsolve.fem.discrete.mesh import GenericCells, Mesh

__all__ = ["MANUFACTURED", "Discrete", "build", "build_mesh", "check_selections", "check_scales", "error_norms",
           "exact_l2_norm", "triangle_mesh"]


# ----------------------------------------------------------------------------------------------
# mesh

def build_mesh(case):
    """The case's mesh: a :class:`Mesh` of P1 triangles (:func:`common.triangle_mesh`), or the element-generic
    path's ``FEMesh`` where the case needs it (``simplex_problem.wants_generic``: P2, tetrahedra, pressure loads)."""
    from hpcsolve.fem.discrete import simplex_problem  # late: the generic path's elements, only where asked for

    if simplex_problem.wants_generic(case):
        return simplex_problem.build_mesh(case)
    try:
        return triangle_mesh(case)
    except GenericCells:            # a file of tetrahedra or quadratic triangles
        return simplex_problem.build_mesh(case)


# ----------------------------------------------------------------------------------------------
# predicate selections

def select_edges(mesh: Mesh, where, field: str) -> np.ndarray:
    """Boundary edges (k, 2) selected by a where table: tag matches and both end nodes satisfy it."""
    tol = where.tol if where.tol is not None else 1e-6 * mesh.size()
    e = mesh.boundary_edges
    return e[select_boundary(mesh.points, e, mesh.edge_tags, mesh.tag_names, where, field, "edge", tol)]


def select_boundary_nodes(mesh: Mesh, where, field: str) -> np.ndarray:
    """Boundary nodes selected by a where table (with a tag: the nodes of the edges with that tag)."""
    tol = where.tol if where.tol is not None else 1e-6 * mesh.size()
    tags = _tags(where)
    if tags is not None:
        nodes = np.unique(select_edges(mesh, type(where)(tag=where.tag, tol=where.tol), field))
    else:
        nodes = mesh.boundary_nodes()
    nodes = nodes[_coord_mask(where, mesh.points[nodes], tol)]
    return nodes


# ----------------------------------------------------------------------------------------------
# the discrete problem

def coefficient_per_cell(case, mesh: Mesh) -> np.ndarray:
    """The coefficient per triangle (``common.coefficient_per_cell``: the regions by their centroids)."""
    return common_coefficient(case, mesh.centroids(), mesh.cell_regions, mesh.size(), "triangle")


def _selected(mesh: Mesh, bc, field: str, select, what: str) -> np.ndarray:
    """The boundary entities ``select`` finds for ``bc.where`` of the case field ``field``; none is a CaseError."""
    found = select(mesh, bc.where, field)
    if found.size == 0:
        raise CaseError.invalid(f"{field}.where", bc.where.model_dump(exclude_none=True),
                                f"a selection with at least one {what} (tags: {', '.join(mesh.tag_names)})",
                                why=f"selects no {what}")
    return found


def neumann_edges(mesh: Mesh, bc, i: int) -> np.ndarray:
    """The boundary edges of ``boundary.neumann[i]``; a selection of none is a CaseError."""
    return _selected(mesh, bc, f"boundary.neumann[{i}]", select_edges, "boundary edge")


def dirichlet_nodes(mesh: Mesh, bc, i: int) -> np.ndarray:
    """The boundary nodes of ``boundary.dirichlet[i]``; a selection of none is a CaseError."""
    return _selected(mesh, bc, f"boundary.dirichlet[{i}]", select_boundary_nodes, "boundary node")

def check_selections(case, mesh: Mesh) -> None:
    """Every boundary condition and region selects something on this mesh, the Dirichlet conditions agree where
    they overlap and hold every part of the body (:func:`fixed_dofs`); raises CaseError otherwise. Cheap, no
    assembly: what the run and `hpcsolve validate` check before anything is solved."""
    path = path_of(mesh)
    path.coefficient(case, mesh)
    list(path.neumann_parts(case, mesh, path.shape(case, mesh)[0]))
    path.fixed_dofs(case, mesh)


def _dirichlet_parts(case, mesh: Mesh):
    """(index, dofs, values, component names) of each Dirichlet condition, in the order of the case."""
    p = case.problem
    for i, bc in enumerate(case.boundary.dirichlet):
        nodes = dirichlet_nodes(mesh, bc, i)
        if p.kind == "poisson":
            yield i, nodes, np.full(nodes.size, float(bc.value)), "u"
            continue
        ux = bc.displacement[0] if bc.displacement is not None else bc.ux
        uy = bc.displacement[1] if bc.displacement is not None else bc.uy
        for c, (name, v) in enumerate((("u_x", ux), ("u_y", uy))):
            if v is not None:
                yield i, 2 * nodes + c, np.full(nodes.size, float(v)), name


def fixed_dofs(case, mesh: Mesh) -> tuple[np.ndarray, np.ndarray]:
    """(fixed DOFs in increasing order, their values) of the case's Dirichlet conditions on this mesh. Refused
    (CaseError): two conditions that fix a node to different values (one of them would silently win), a
    manufactured solution's mesh or boundary that does not fit it, a part of a mesh file without a Dirichlet
    node, and an elastic body whose fixed displacements leave a rigid-body motion free (a singular matrix)."""
    ncomp = 1 if case.problem.kind == "poisson" else 2
    owner, value = collect_fixed(case, mesh.points, ncomp, _dirichlet_parts(case, mesh))
    fixed = np.flatnonzero(owner >= 0)
    if case.problem.manufactured:
        _check_manufactured_mesh(case, mesh, fixed)
    # the generated meshes are one piece by construction
    label = _check_every_part_fixed(case, mesh, fixed // ncomp) if case.mesh.kind == "file" else None
    if ncomp == 2:
        _check_rigid_modes(case, mesh, fixed, label)
    return fixed, value[fixed]


def _check_rigid_modes(case, mesh: Mesh, fixed: np.ndarray, label: np.ndarray | None) -> None:
    """In plane elasticity the fixed DOFs of each connected part must stop its three rigid-body motions (two
    translations, one rotation: the null space of its stiffness matrix, exact in P1): the (fixed x 3) matrix of
    those motions at the fixed DOFs has rank 3. Otherwise the matrix is singular (CG runs to maxiter, multigrid
    reports it not SPD): refused naming the motion left free."""
    node, comp = fixed // 2, fixed % 2
    part = label[node] if label is not None else np.zeros(node.size, dtype=np.int64)
    scale = mesh.size()
    for k in np.unique(part):
        n_k, c_k = node[part == k], comp[part == k]
        xy = mesh.points[n_k]
        centre = xy.mean(axis=0)
        d = (xy - centre) / scale
        modes = np.zeros((max(n_k.size, 3), 3))       # at least 3 rows: the SVD gives all three right vectors
        rows = modes[:n_k.size]
        rows[c_k == 0, 0] = 1.0
        rows[c_k == 1, 1] = 1.0
        rows[:, 2] = np.where(c_k == 0, -d[:, 1], d[:, 0])      # an infinitesimal rotation (-y, x) about the centre
        _, s, vt = np.linalg.svd(modes, full_matrices=False)
        if s[2] > 1e-9 * s[0]:
            continue
        if not (c_k == 0).any() or not (c_k == 1).any():
            free = f"a translation along {'x (no u_x is fixed)' if not (c_k == 0).any() else 'y (no u_y is fixed)'}"
        else:
            a, b, c = vt[-1]      # a x-translation + b y-translation + c rotation vanishes at every fixed DOF
            pivot = centre + scale * np.array([-b, a]) / c + 0.0      # + 0.0: no "-0" in the message
            free = f"a rotation about ({pivot[0]:g}, {pivot[1]:g})"
        where = "" if label is None or len(np.unique(label)) == 1 else \
            f" (in the mesh part of node {int(n_k[0])})"
        raise CaseError.invalid(
            "boundary.dirichlet", _dirichlet_values(case),
            "conditions that hold the body: some u_x fixed, some u_y fixed, and the rotation pinned (both components "
            "at two distinct nodes, u_x at two nodes of different y, or u_y at two nodes of different x)",
            why=f"the fixed displacements{where} leave {free} free, so the stiffness matrix is singular (no unique "
                "solution)")


def build(case, mesh: Mesh | None = None, backend=None, xp=None) -> Discrete:
    """The case's discrete system. ``backend`` (a ``hpcsolve.core.backends.Backend``) with a device array module
    (``device.array_module``: CuPy, also for Numba-CUDA): assembly, condensation and the matrix on the device,
    ``Discrete.A`` a checked ``DeviceCSR`` of the backend's low ops; else SciPy on the host. ``xp`` forces the
    device path with that module (``numpy``: the same code on the host, what the tests compare)."""
    t0 = time.perf_counter()
    mesh = mesh if mesh is not None else build_mesh(case)
    t1 = time.perf_counter()
    if xp is not None and backend is None:
        backend = backends.get("numpy")
    xp = xp if xp is not None else device.array_module(backend) if backend is not None else None
    with np.errstate(over="ignore", invalid="ignore"):   # extreme inputs: _scale names the field that overflows
        return _assemble(case, mesh, t0, t1, xp, backend, path_of(mesh))


def path_of(mesh):
    """The assembly path of a mesh: :class:`TrianglePath` for a :class:`Mesh`, ``SimplexPath`` for the rest."""
    if isinstance(mesh, Mesh):
        return TrianglePath
    from hpcsolve.fem.discrete import simplex_problem  # late: the generic path's elements, only for its meshes

    return simplex_problem.SimplexPath


def _element_system(case, mesh, coef):
    """(element DOFs, element matrices, load vector, exact solution or None) on ``mesh`` (a Mesh or DeviceMesh)."""
    p = case.problem
    xp = get_array_module(mesh.points)
    k = float(coef[0]) if coef.size and bool((coef == coef[0]).all()) else xp.asarray(coef)
    if p.kind == "poisson":
        dofs, local = assembly.stiffness_local(mesh, k)
        if p.manufactured:
            u_ex, grad_ex, f = MANUFACTURED[p.manufactured]
            return dofs, local, assembly.load(mesh, f) * p.conductivity, (u_ex, grad_ex)   # k f: uniform k
        b = assembly.load(mesh, p.source) if p.source != 0.0 else xp.zeros(mesh.n_points)
        return dofs, local, b, None
    dofs, local = assembly.elasticity_local(mesh, k, p.poisson_ratio, p.model_in(2), p.thickness)
    b = xp.zeros(2 * mesh.n_points)
    for c in range(2):
        if p.body_force_in(2)[c] != 0.0:
            b[c::2] += p.thickness * assembly.load(mesh, p.body_force_in(2)[c])
    return dofs, local, b, None


class TrianglePath:
    """What the assembly (:func:`assemble`) asks of a mesh kind, for the 2D P1 triangles of :class:`Mesh`; the
    element-generic path (P2, tetrahedra) is ``hpcsolve.fem.discrete.simplex_problem.SimplexPath``."""

    coefficient = staticmethod(lambda case, mesh: coefficient_per_cell(case, mesh))
    upload = staticmethod(lambda mesh, xp: device.upload(mesh, xp))
    element_system = staticmethod(lambda case, mesh, coef, matrix=True: _element_system(case, mesh, coef))
    fused_matrix = staticmethod(lambda case, mesh, coef: None)       # element matrices and a COO sum, always
    neumann_parts = staticmethod(lambda case, mesh, ncomp: _neumann_parts(case, mesh, ncomp))
    fixed_dofs = staticmethod(lambda case, mesh: fixed_dofs(case, mesh))

    @staticmethod
    def shape(case, mesh) -> tuple[int, int]:
        """(unknowns per node, unknowns)."""
        ncomp = 1 if case.problem.kind == "poisson" else 2
        return ncomp, mesh.n_points * ncomp

    @staticmethod
    def discrete(mesh, dmesh, **parts) -> Discrete:
        return Discrete(mesh, device_mesh=dmesh, **parts)


def _assemble(case, mesh: Mesh, t0: float, t1: float, xp=None, backend=None, path=TrianglePath) -> Discrete:
    p = case.problem
    coef = path.coefficient(case, mesh)
    dmesh = path.upload(mesh, xp) if xp is not None else None
    ncomp, n = path.shape(case, mesh)
    where = dmesh if dmesh is not None else mesh
    fused = path.fused_matrix(case, where, coef)           # a matrix made without element matrices, or None
    dofs, local, b, exact = path.element_system(case, where, coef, matrix=fused is None)
    if dmesh is None:
        K = assembly._to_csr(dofs, local, n) if fused is None else sp.csr_matrix(fused[::-1], shape=(n, n))
        kvals = K.data
    else:
        rows, cols, kvals = device.coo_sum(dofs, local, n) if fused is None else device.csr_entries(*fused)
        device.synchronize(xp)         # the assembly's own time, not left to the next phase's first sync
    del local
    t2 = time.perf_counter()
    coefficient_field = "problem.conductivity" if p.kind == "poisson" else "problem.young"
    source_field, source_value = _source(p)
    # the smallest coefficient sets how large the solution can grow: the matrix scale it stands for
    contrast = float(coef.min() / coef.max())
    scales = {coefficient_field: (_scale(kvals, coefficient_field, getattr(p, coefficient_field.split(".")[1]),
                                         "the stiffness matrix")[0] * contrast,
                                  [float(coef.min()), float(coef.max())]),
              source_field: _scale(b, source_field, source_value, "the load vector")}
    for name, part in path.neumann_parts(case, mesh, ncomp):
        part = part if xp is None else xp.asarray(part)
        scales[name] = _scale(part, name, _neumann_given(case, name), "its boundary load")
        b += part
    fixed, values = path.fixed_dofs(case, mesh)
    if dmesh is None:
        A, rhs, free = assembly.condense(K, b, fixed, values)
        lifted = rhs - b[free]
    else:
        indptr, indices, data, rhs, free = device.condense(rows, cols, kvals, b, n, xp.asarray(fixed),
                                                           xp.asarray(values))
        lifted = rhs - b[free]
        A = device.device_solver_matrix(backend.piece("fem.low_ops")(), xp, indptr, indices, data, int(free.size))
        rhs, free = to_host(rhs), to_host(free)
    if free.size == 0:
        raise CaseError("boundary.dirichlet: every unknown is fixed; nothing is left to solve", field="boundary.dirichlet")
    scales["boundary.dirichlet"] = _scale(lifted, "boundary.dirichlet", _dirichlet_values(case),
                                          "the lifted boundary values")
    t3 = time.perf_counter()
    return path.discrete(mesh, dmesh, kind=p.kind, ncomp=ncomp, A=A, b=rhs, free=free, fixed=fixed,
                         fixed_values=values, coefficient=coef, exact=exact,
                         timings={"mesh_s": t1 - t0, "assembly_s": t2 - t1, "boundary_conditions_s": t3 - t2},
                         scales=scales)


def _neumann_parts(case, mesh: Mesh, ncomp: int):
    """(case field, host load vector) of each Neumann condition."""
    p = case.problem
    for i, bc in enumerate(case.boundary.neumann):
        edges = neumann_edges(mesh, bc, i)
        if bc.flux is not None:
            part = assembly.edge_load(mesh, edges, bc.flux)
        elif bc.traction is not None:
            part = p.thickness * assembly.edge_load(mesh, edges, np.asarray(bc.traction), ncomp=2)
        else:
            length = assembly.edge_lengths(mesh, edges).sum()
            part = assembly.edge_load(mesh, edges, np.asarray(bc.total_force) / length, ncomp=2)
        yield f"boundary.neumann[{i}]", part


def _neumann_given(case, name: str):
    bc = case.boundary.neumann[int(name.split("[")[1].rstrip("]"))]
    return bc.flux if bc.flux is not None else bc.traction if bc.traction is not None else bc.total_force


def _check_every_part_fixed(case, mesh: Mesh, fixed_nodes: np.ndarray) -> np.ndarray:
    """Each connected part of the mesh needs a Dirichlet condition of its own: a part without one has no unique
    solution (its matrix block is singular), and a solver would return one of many answers as converged. Returns
    each node's part."""
    parts, label = mesh.node_parts()
    if parts == 1:
        return label
    loose = np.setdiff1d(np.arange(parts), np.unique(label[fixed_nodes]))
    if loose.size:
        nodes = np.flatnonzero(label == loose[0])
        lo, hi = mesh.points[nodes].min(axis=0), mesh.points[nodes].max(axis=0)
        raise CaseError.invalid("boundary.dirichlet", _dirichlet_values(case),
                                "a condition on every connected part of the mesh",
                                why=f"the mesh has {parts} separate parts and {loose.size} of them have no Dirichlet "
                                    f"node (their solution is not unique), first: {nodes.size} nodes in "
                                    f"[{lo[0]:g}, {hi[0]:g}] x [{lo[1]:g}, {hi[1]:g}]")
    return label


def _check_manufactured_mesh(case, mesh: Mesh, fixed: np.ndarray) -> None:
    """A manufactured solution's mesh (a file: the case validation checked the built-in kinds) spans the unit
    square and its whole boundary is fixed (u = 0 there): else the errors would be against another problem's
    solution."""
    field, value = ("mesh.path", case.mesh.path) if case.mesh.kind == "file" else ("mesh.kind", case.mesh.kind)
    lo, hi = mesh.bounds()
    if not (np.allclose(lo, 0.0, atol=1e-9) and np.allclose(hi, 1.0, atol=1e-9)):
        raise CaseError.invalid(field, value,
                                "a mesh of the unit square [0, 1] x [0, 1]",
                                why=f"problem.manufactured = {case.problem.manufactured!r} is a solution on the unit "
                                    f"square; this mesh spans [{lo[0]:g}, {hi[0]:g}] x [{lo[1]:g}, {hi[1]:g}]")
    edge = np.unique(mesh.boundary_edges)
    x, y = mesh.points[edge, 0], mesh.points[edge, 1]
    tol = 1e-9
    inside = ~((np.abs(x) <= tol) | (np.abs(x - 1.0) <= tol) | (np.abs(y) <= tol) | (np.abs(y - 1.0) <= tol))
    if inside.any():
        raise CaseError.invalid(field, value,
                                "a mesh of the whole unit square [0, 1] x [0, 1]",
                                why=f"problem.manufactured = {case.problem.manufactured!r} is a solution on the unit "
                                    f"square; {int(inside.sum())} boundary nodes of this mesh lie inside it (a hole "
                                    "or a notch), where the solution is not 0")
    loose = np.setdiff1d(edge, fixed)
    if loose.size:
        raise CaseError.invalid("boundary.dirichlet", _dirichlet_values(case),
                                "conditions that fix u = 0 on the whole boundary",
                                why=f"problem.manufactured is zero on the unit square's boundary; {loose.size} "
                                    "boundary nodes are not fixed")


# ----------------------------------------------------------------------------------------------
# the range of the numbers: a system whose norms overflow is refused naming the case field

#: largest 2-norm of a right-hand-side part, the matrix, or the solution bound, by storage bytes:
#: the Krylov loops square these (dot products), so they stay below sqrt(largest float)
SCALE_LIMIT = {8: 1e150, 4: 1e18, 2: 1e18}
#: largest bound on the solution (any precision: the solve works on b scaled to max |b| ~ 1, float64 holds x)
SOLUTION_LIMIT = float(np.finfo(np.float64).max)


def _source(p) -> tuple[str, object]:
    if p.kind == "poisson":
        return ("problem.manufactured", p.manufactured) if p.manufactured else ("problem.source", p.source)
    return "problem.body_force", p.body_force


def _scale(values, field: str, given, what: str) -> tuple[float, object]:
    """(2-norm of ``values`` (NumPy or CuPy) computed without overflow, the case value ``given``); refused if not
    finite."""
    with np.errstate(over="ignore", invalid="ignore"):
        norm = device.norm2(values)
    if not np.isfinite(norm):
        raise CaseError.invalid(field, given, "values whose finite-element system stays finite",
                                why=f"{what} overflows float64 (inf/nan)")
    return norm, given


def check_scales(disc: Discrete, storage_bytes: int) -> None:
    """Refuse a system the Krylov solver cannot hold in the working precision: the matrix beyond SCALE_LIMIT, or a
    bound on the solution (||b|| n^1.5 / (||A||_F k_min / k_max), an upper estimate for P1 stiffness matrices with
    coefficients k) beyond float64 (SOLUTION_LIMIT); the message names the field. The loads' own scale is free
    (1e-300 and 1e300 solve: b is scaled by a power of two before the solve)."""
    limit = SCALE_LIMIT.get(storage_bytes, SCALE_LIMIT[8])
    precision = f"{8 * storage_bytes}-bit floats"
    (coefficient_field, (matrix, coefficient)), *parts = disc.scales.items()
    if not (1.0 / limit <= matrix <= limit):
        raise CaseError.invalid(coefficient_field, coefficient, f"coefficients (smallest, largest; with "
                                f"problem.regions) that keep ||A|| k_min / k_max in [{1 / limit:g}, {limit:g}]",
                                why=f"the stiffness matrix scale {matrix:.3g} is outside what {precision} can "
                                    f"solve with")
    # the loads need no limit of their own: the solve scales b by a power of two to max |b| ~ 1 (exact) and the
    # solution back (hpcsolve.fem.linalg.scaling); only a solution beyond float64 itself is refused here
    rhs = max((norm for _, (norm, _) in parts), default=0.0)
    bound = rhs / matrix * disc.A.shape[0] ** 1.5
    limit, precision = SOLUTION_LIMIT, "64-bit floats"
    if bound > limit:
        largest, (_, given) = max(parts, key=lambda kv: kv[1][0])
        raise CaseError.invalid(largest, given, f"a load / coefficient ratio whose solution stays below "
                                f"{limit:g}", why=f"the solution could reach ~{bound:.3g} (||b|| {rhs:.3g}, ||A|| "
                                f"{matrix:.3g}), beyond {precision}; scale the loads down or {coefficient_field} up")


# ----------------------------------------------------------------------------------------------
# error norms

# Dunavant degree-4 rule: 6 points (barycentric), weights summing to 1
_Q_BARY = np.array([[0.108103018168070, 0.445948490915965, 0.445948490915965],
                    [0.445948490915965, 0.108103018168070, 0.445948490915965],
                    [0.445948490915965, 0.445948490915965, 0.108103018168070],
                    [0.816847572980459, 0.091576213509771, 0.091576213509771],
                    [0.091576213509771, 0.816847572980459, 0.091576213509771],
                    [0.091576213509771, 0.091576213509771, 0.816847572980459]])
_Q_W = np.array([0.223381589678011] * 3 + [0.109951743655322] * 3)


def error_norms(mesh, u, exact, grad_exact) -> tuple[float, float]:
    """(L2 error, H1-seminorm error) of the P1 field u against an exact solution, by 6-point quadrature.
    Array-module generic: a DeviceMesh and a device u compute on the device (two floats come back). The generic
    path's mesh (an ``FEMesh``: P2, tetrahedra) has its own quadrature (``simplex_problem.error_norms``)."""
    if hasattr(mesh, "dofmap"):
        from hpcsolve.fem.discrete import simplex_problem  # late: the generic path's elements, only for its meshes

        return simplex_problem.error_norms(mesh, u, exact, grad_exact)
    area, bx, by = assembly._gradients(mesh)
    xp = get_array_module(area)
    t = mesh.triangles
    p = mesh.points[t]                                # (m, 3, 2)
    bary, wq = xp.asarray(_Q_BARY), xp.asarray(_Q_W)
    qx, qy = p[:, :, 0] @ bary.T, p[:, :, 1] @ bary.T  # (m, 6): the quadrature points
    ue = xp.asarray(u)[t]                             # (m, 3)
    uh = ue @ bary.T                                  # (m, 6)
    l2 = xp.sqrt(xp.sum(area * (((uh - exact(qx, qy)) ** 2) @ wq)))
    gx, gy = grad_exact(qx, qy)
    ghx = (ue * bx).sum(1)[:, None]
    ghy = (ue * by).sum(1)[:, None]
    h1 = xp.sqrt(xp.sum(area * (((ghx - gx) ** 2 + (ghy - gy) ** 2) @ wq)))
    return float(l2), float(h1)


def exact_l2_norm(mesh, exact, chunk: int = 1 << 18) -> float:
    """||u||_L2 of an exact solution on the mesh's domain by the 6-point rule of :func:`error_norms` (what its L2
    error is relative to), on the host in chunks of ``chunk`` triangles (no (m, 6) arrays of a large mesh at once).
    The generic path's mesh: ``simplex_problem.exact_l2_norm``."""
    if hasattr(mesh, "dofmap"):
        from hpcsolve.fem.discrete import simplex_problem  # late: the generic path's elements, only for its meshes

        return simplex_problem.exact_l2_norm(mesh, exact)
    pts, tris = to_host(mesh.points), to_host(mesh.triangles)
    total = 0.0
    for k in range(0, tris.shape[0], chunk):
        p = pts[tris[k:k + chunk]]                                   # (c, 3, 2)
        area = 0.5 * np.abs((p[:, 1, 0] - p[:, 0, 0]) * (p[:, 2, 1] - p[:, 0, 1])
                            - (p[:, 2, 0] - p[:, 0, 0]) * (p[:, 1, 1] - p[:, 0, 1]))
        qx, qy = p[:, :, 0] @ _Q_BARY.T, p[:, :, 1] @ _Q_BARY.T
        total += float(np.sum(area * ((exact(qx, qy) ** 2) @ _Q_W)))
    return float(np.sqrt(total))
