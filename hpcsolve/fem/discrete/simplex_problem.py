"""From an FEMCase to a linear system on the element-generic path: P1 or P2 Lagrange elements on triangles or
tetrahedra (``hpcsolve.fem.discrete.elements``, ``fe_assembly``), on a :class:`SimplexMesh` (a box of tetrahedra,
a 2D generator's triangles, or a mesh file of tetrahedra / triangles, linear or quadratic).

The flow is :func:`hpcsolve.fem.discrete.problem.build`'s (one ``_assemble``: coefficients, element system, COO
sum, loads, Dirichlet condensation, on the host or a device); :class:`SimplexPath` answers what it asks of the
mesh. Selections follow the case's where tables as on the P1 path: a boundary facet is selected when all its
vertices are (and its tag matches); a Dirichlet condition fixes the DOFs of the selected facets that satisfy the
coordinate keys (for P2 the edge-midpoint DOFs too); a region selects cells by their centroids.

The 2D P1 cases keep their own path (``problem.TrianglePath``, the GPU-tuned assembly); this one is taken where a
case needs it (:func:`wants_generic`): ``problem.element = "P2"``, a box, a file of tetrahedra or quadratic
cells, or a pressure load.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hpcsolve.core.backends import get_array_module, to_host
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete import elements, fe_assembly, simplex_gen, tet_assembly
from hpcsolve.fem.discrete import common
from hpcsolve.fem.discrete.simplex import EDGES
from hpcsolve.fem.linalg.precond.geometric import StructuredGrid
from hpcsolve.fem.linalg.precond.pcoarsen import QuadraticGrid
from hpcsolve.fem.discrete.common import MANUFACTURED, coord_mask, select_boundary, where_tags
from hpcsolve.fem.discrete.simplex import FACETS, DofMap, SimplexMesh


def wants_generic(case) -> bool:
    """Whether the case runs on this path (P2, a box, a pressure load; a file of tetrahedra or quadratic cells is
    found when it is read: :func:`hpcsolve.fem.discrete.problem.build_mesh`)."""
    return (case.problem.element == "P2" or case.mesh.kind in ("box", "thick_cylinder")
            or any(bc.pressure is not None for bc in case.boundary.neumann))


def build_mesh(case) -> "FEMesh":
    """The case's mesh with its element and DOF map: a box, a 2D generator's triangles (refined as on the P1
    path), or a file."""
    m = case.mesh
    if m.kind == "box":
        mesh = simplex_gen.box(m.nx, m.ny or m.nx, m.nz or m.nx, tuple(m.x), tuple(m.y), tuple(m.z))
    elif m.kind == "thick_cylinder":
        mesh = thick_cylinder(m.nx, m.ny or m.nx, m.nz or m.nx, tuple(m.r), tuple(m.z))
    elif m.kind == "file":
        from hpcsolve.fem.discrete import simplex_io  # late: meshio's import, only for a file

        p = Path(m.path)
        mesh, _ = simplex_io.read_simplex_mesh(p if p.is_absolute() else case.base_dir / p)
        if m.refine:
            raise CaseError.invalid("mesh.refine", m.refine, "0 for a mesh file read as tetrahedra or quadratic cells",
                                    why="uniform refinement is written for P1 triangle meshes")
    else:
        mesh = simplex_gen.from_mesh(common.triangle_mesh(case))
    check_dimension(case, mesh)
    return fe_mesh(case, mesh)


#: the box's side tags renamed on the thick cylinder: r = inner / outer, the planes y = 0 and x = 0, z's ends
CYLINDER_TAGS = {"left": "inner", "right": "outer", "bottom": "y0", "top": "x0", "front": "z0", "back": "z1"}


def thick_cylinder(nr: int, nt: int, nz: int, r: tuple[float, float], z: tuple[float, float]) -> SimplexMesh:
    """A quarter of a hollow cylinder (x, y >= 0, inner radius r[0], outer r[1], z in ``z``): the box of nr x nt x nz
    cells over (radius, angle 0..pi/2, z) mapped by (r cos t, r sin t, z), whose Jacobian r > 0 keeps every
    tetrahedron's orientation; the curved faces are straight-sided between nodes (a geometric error O(h^2)).
    Tags: inner, outer (the radii), y0 (the plane y = 0), x0 (the plane x = 0), z0, z1 (the ends)."""
    box = simplex_gen.box(nr, nt, nz, r, (0.0, np.pi / 2), z)
    rad, ang = box.points[:, 0], box.points[:, 1]
    pts = np.column_stack([rad * np.cos(ang), rad * np.sin(ang), box.points[:, 2]])
    pts[np.isclose(ang, np.pi / 2), 0] = 0.0              # cos(pi/2) is 6e-17: the plane x = 0 exactly
    tags = np.array([CYLINDER_TAGS.get(t, t) for t in box.facet_tags.tolist()])
    return dataclasses.replace(box, points=pts, facet_tags=tags, source=f"thick_cylinder {nr}x{nt}x{nz}")


def check_dimension(case, mesh: SimplexMesh) -> None:
    """The case's vectors and where keys fit the mesh's space dimension (a file's is known once read)."""
    from hpcsolve.fem.case import check_dimension as check  # late: the case model imports the registries

    try:
        check(case, mesh.dim)
    except ValueError as e:
        raise CaseError.invalid("mesh", mesh.source or case.mesh.kind, f"a mesh that fits the case ({e})") from None


def model_of(case, dim: int) -> str:
    """The elasticity model of ``fe_assembly``: '3d' on a 3D mesh (the case's 'solid'), its plane model in 2D."""
    return "3d" if dim == 3 else case.problem.model_in(dim)


# ----------------------------------------------------------------------------------------------
# the mesh with its DOF map, on the host or a device

@dataclass
class FEMesh:
    """A SimplexMesh with the element and DOF map of the case: the "mesh" of the generic path (what
    ``Discrete.mesh`` holds there, and what the kernels take, on the host or a device). ``points`` are the DOFs'
    coordinates (the vertices first, then P2's edge midpoints): the nodes a solution is given at."""

    mesh: SimplexMesh
    element: elements.Element
    dofmap: DofMap
    xp: object = np
    #: ||exact||_L2 of the exact solutions :func:`error_norms` met on this mesh: id -> (the callable, the norm)
    exact_norms: dict = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @property
    def points(self):
        return self.dofmap.points

    @property
    def n_points(self) -> int:
        return self.dofmap.n_dofs

    @property
    def dim(self) -> int:
        return self.mesh.dim

    @property
    def n_cells(self) -> int:
        return self.mesh.n_cells

    @property
    def source(self) -> str:
        return self.mesh.source

    @property
    def info(self) -> dict:
        return self.mesh.info

    @property
    def tag_names(self) -> list[str]:
        return self.mesh.tag_names

    def h_max(self) -> float:
        return self.mesh.h_max()

    def size(self) -> float:
        return self.mesh.size()

    def bounds(self):
        return self.mesh.bounds()

    def display_level(self):
        return None

    def multigrid_grid(self, free, ncomp: int):
        """What geometric multigrid ("mg") needs of this mesh's unknowns: P2, the P1-into-P2 numbering of the
        p-multigrid level (``precond.pcoarsen.QuadraticGrid``, the vertices' grid where a generator made one); P1 on
        a generator's box, its ``StructuredGrid`` (nx, ny, free, ncomp, nz)."""
        cells = self.info.get("grid")
        if self.dofmap.degree == 2:
            return QuadraticGrid(self.mesh.n_points, p2_edge_ends(self), free, ncomp, cells)
        if cells is None:
            raise CaseError.invalid("solve.preconditioner", "mg", "amg (or auto) for this mesh",
                                    why=f"geometric multigrid on P1 elements needs a generator's grid of nodes; "
                                        f"{self.source or 'this mesh'} has none")
        return StructuredGrid(cells[0], cells[1], free, ncomp, cells[2] if len(cells) == 3 else 0)

    def cell_type(self) -> str:
        """The cells of the solution's nodes, as meshio / XDMF name them (node order: simplex.py)."""
        base = "tetra" if self.dim == 3 else "triangle"
        return base + ("10" if self.dim == 3 else "6") if self.dofmap.degree == 2 else base


def p2_edge_ends(fm: FEMesh) -> np.ndarray:
    """(E, 2) the end vertices of the edge behind each P2 edge DOF (DOF n_vertices + e), from the cells' DOFs (the
    vertices, then the edges in ``EDGES`` order), on the host."""
    cd = to_host(fm.dofmap.cell_dofs).astype(np.int64)
    nv, d = fm.mesh.n_points, fm.dim
    ends = np.zeros((fm.dofmap.n_dofs - nv, 2), dtype=np.int64)
    for k, (a, b) in enumerate(EDGES[d]):
        ends[cd[:, d + 1 + k] - nv] = cd[:, [a, b]]
    return ends


def fe_mesh(case, mesh: SimplexMesh) -> FEMesh:
    degree = 2 if case.problem.element == "P2" else 1
    return FEMesh(mesh, elements.element(mesh.dim, degree), simplex_gen.dofmap(mesh, degree))


def upload(fm: FEMesh, xp) -> FEMesh:
    """The mesh and DOF map on the device of ``xp`` (one copy of each array the kernels read)."""
    mesh = dataclasses.replace(fm.mesh, points=xp.asarray(fm.mesh.points, dtype=xp.float64),
                               cells=xp.asarray(fm.mesh.cells, dtype=xp.int32), info={})
    dm = dataclasses.replace(fm.dofmap, points=xp.asarray(fm.dofmap.points, dtype=xp.float64),
                             cell_dofs=xp.asarray(fm.dofmap.cell_dofs, dtype=xp.int32))
    return FEMesh(mesh, fm.element, dm, xp)


# ----------------------------------------------------------------------------------------------
# selections

def _tol(mesh: SimplexMesh, where) -> float:
    return where.tol if where.tol is not None else 1e-6 * mesh.size()


def select_facets(mesh: SimplexMesh, where, field: str) -> np.ndarray:
    """Indices of the boundary facets a where table selects: tag matches and every vertex satisfies it."""
    return np.flatnonzero(select_boundary(mesh.points, mesh.facets, mesh.facet_tags, mesh.tag_names, where, field,
                                          "facet", _tol(mesh, where)))


def select_boundary_dofs(fm: FEMesh, where, field: str) -> np.ndarray:
    """The boundary DOFs a where table selects (with a tag: those of the facets with that tag)."""
    mesh, dm = fm.mesh, fm.dofmap
    if where_tags(where) is not None:
        facets = select_facets(mesh, type(where)(tag=where.tag, tol=where.tol), field)
        dofs = np.unique(dm.facet_dofs[facets])
    else:
        dofs = np.unique(dm.facet_dofs)
    return dofs[coord_mask(where, dm.points[dofs], _tol(mesh, where))]


def coefficient_per_cell(case, fm: FEMesh) -> np.ndarray:
    """The coefficient per cell (``common.coefficient_per_cell``: the regions by their centroids)."""
    mesh = fm.mesh
    return common.coefficient_per_cell(case, mesh.points[mesh.cells].mean(axis=1), mesh.cell_regions, mesh.size(),
                                       "cell")


def _selected(mesh: SimplexMesh, found: np.ndarray, bc, field: str, what: str) -> np.ndarray:
    if found.size == 0:
        raise CaseError.invalid(f"{field}.where", bc.where.model_dump(exclude_none=True),
                                f"a selection with at least one {what} (tags: {', '.join(mesh.tag_names)})",
                                why=f"selects no {what}")
    return found


# ----------------------------------------------------------------------------------------------
# element system, loads, Dirichlet DOFs

def _coefficient(coef, xp):
    """The coefficient as the kernels take it: one number where every cell has the same, else one per cell."""
    return float(coef[0]) if coef.size and bool((coef == coef[0]).all()) else xp.asarray(coef)


def fused_matrix(case, fm: FEMesh, coef):
    """(indptr, indices, data) of the stiffness as CSR with sorted columns, on the host or device of ``fm``, where
    the two-phase assembly of ``tet_assembly`` applies (Poisson on P1 tetrahedra: the CSR pattern, then the values
    summed straight into it, no COO entries and no sort of them); None elsewhere (element matrices and a COO sum)."""
    if case.problem.kind != "poisson" or fm.dim != 3 or fm.dofmap.degree != 1:
        return None
    xp = get_array_module(fm.mesh.points)
    pat = tet_assembly.pattern(fm.mesh.cells, fm.n_points, xp)
    data = tet_assembly.stiffness_values(fm.mesh.points, fm.mesh.cells, pat.positions, pat.nnz,
                                         _coefficient(coef, xp))
    return pat.indptr, pat.indices, data


def element_system(case, fm: FEMesh, coef, matrix: bool = True):
    """(element DOFs, element matrices, load vector, exact solution or None) on ``fm`` (host or device); without
    ``matrix`` the DOFs and matrices are None (the matrix made by :func:`fused_matrix`)."""
    p = case.problem
    xp = get_array_module(fm.mesh.points)
    k = _coefficient(coef, xp)
    mesh, dm, el = fm.mesh, fm.dofmap, fm.element
    if p.kind == "poisson":
        dofs, local = fe_assembly.stiffness_local(mesh, dm, el, k) if matrix else (None, None)
        if p.manufactured:
            u_ex, grad_ex, f = MANUFACTURED[p.manufactured]
            return dofs, local, fe_assembly.load(mesh, dm, el, f) * p.conductivity, (u_ex, grad_ex)
        b = fe_assembly.load(mesh, dm, el, p.source) if p.source != 0.0 else xp.zeros(dm.n_dofs)
        return dofs, local, b, None
    dim = mesh.dim
    dofs, local = fe_assembly.elasticity_local(mesh, dm, el, k, p.poisson_ratio, model_of(case, dim),
                                               p.thickness if dim == 2 else 1.0)
    b = xp.zeros(dim * dm.n_dofs)
    scale = p.thickness if dim == 2 else 1.0
    for c, f in enumerate(p.body_force_in(dim)):
        if f != 0.0:
            b[c::dim] += scale * fe_assembly.load(mesh, dm, el, float(f))
    return dofs, local, b, None


def facet_normals(mesh: SimplexMesh, facets: np.ndarray) -> np.ndarray:
    """(k, d) outward unit normals of the boundary facets ``facets`` (indices): the facet's own normal, turned
    away from the cell it bounds (found by the facet's sorted vertices among the cells' facets)."""
    d = mesh.dim
    local = FACETS[d]
    keys = _row_keys(np.sort(mesh.cells[:, local].reshape(-1, d), axis=1))      # facet i of cell c: row (d+1) c + i
    order = np.argsort(keys)
    # the cell of each wanted facet (a boundary facet belongs to one cell)
    owner = order[np.searchsorted(keys[order], _row_keys(np.sort(mesh.facets[facets], axis=1)))] // (d + 1)
    p = mesh.points
    v = p[mesh.facets[facets]]                                          # (k, d, d)
    if d == 2:
        t = v[:, 1] - v[:, 0]
        n = np.stack([t[:, 1], -t[:, 0]], axis=1)
    else:
        n = np.cross(v[:, 1] - v[:, 0], v[:, 2] - v[:, 0])
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    away = (v.mean(axis=1) - p[mesh.cells[owner]].mean(axis=1)) * n
    return n * np.where(away.sum(axis=1) < 0, -1.0, 1.0)[:, None]


def _row_keys(rows: np.ndarray) -> np.ndarray:
    """One sortable key per row of non-negative integers (a void view of the big-endian bytes: orders as the rows)."""
    r = np.ascontiguousarray(rows.astype(">i8"))
    return r.view(np.dtype((np.void, r.dtype.itemsize * r.shape[1]))).ravel()


def neumann_parts(case, fm: FEMesh, ncomp: int):
    """(case field, host load vector) of each Neumann condition."""
    p, mesh, dm, el = case.problem, fm.mesh, fm.dofmap, fm.element
    dim = mesh.dim
    thick = p.thickness if (dim == 2 and p.kind == "elasticity") else 1.0
    for i, bc in enumerate(case.boundary.neumann):
        field = f"boundary.neumann[{i}]"
        facets = _selected(mesh, select_facets(mesh, bc.where, field), bc, field, "boundary facet")
        if bc.flux is not None:
            part = fe_assembly.facet_load(mesh, dm, el, facets, float(bc.flux), 1)
        elif bc.pressure is not None:
            value = -float(bc.pressure) * facet_normals(mesh, facets)            # (k, d): traction -p n
            part = thick * fe_assembly.facet_load(mesh, dm, el, facets, value, dim)
        elif bc.traction is not None:
            part = thick * fe_assembly.facet_load(mesh, dm, el, facets, np.asarray(bc.traction, dtype=float), dim)
        else:
            area = fe_assembly.facet_measures(mesh, facets).sum()
            part = fe_assembly.facet_load(mesh, dm, el, facets, np.asarray(bc.total_force, dtype=float) / area, dim)
        yield field, part


def _dirichlet_parts(case, fm: FEMesh):
    """(index, dofs, values, component name) of each Dirichlet condition, in the order of the case."""
    p, dim = case.problem, fm.dim
    for i, bc in enumerate(case.boundary.dirichlet):
        field = f"boundary.dirichlet[{i}]"
        nodes = _selected(fm.mesh, select_boundary_dofs(fm, bc.where, field), bc, field, "boundary node")
        if p.kind == "poisson":
            yield i, nodes, np.full(nodes.size, float(bc.value)), "u"
            continue
        given = tuple(bc.displacement) if bc.displacement is not None else (bc.ux, bc.uy, bc.uz)[:dim]
        for c, v in enumerate(given):
            if v is not None:
                yield i, dim * nodes + c, np.full(nodes.size, float(v)), "u_" + "xyz"[c]


def fixed_dofs(case, fm: FEMesh) -> tuple[np.ndarray, np.ndarray]:
    """(fixed DOFs in increasing order, their values); refused as on the P1 path: conflicting conditions, a
    manufactured solution whose boundary is not all fixed, rigid-body motions left free."""
    ncomp = 1 if case.problem.kind == "poisson" else fm.dim
    owner, value = common.collect_fixed(case, fm.points, ncomp, _dirichlet_parts(case, fm))
    fixed = np.flatnonzero(owner >= 0)
    if case.problem.manufactured:
        loose = np.setdiff1d(np.unique(fm.dofmap.facet_dofs), fixed)
        lo, hi = fm.mesh.bounds()
        if not (np.allclose(lo, 0.0, atol=1e-9) and np.allclose(hi, 1.0, atol=1e-9)) or loose.size:
            raise CaseError.invalid("boundary.dirichlet", common.dirichlet_values(case),
                                    "u = 0 fixed on the whole boundary of the unit square / cube",
                                    why=f"problem.manufactured = {case.problem.manufactured!r} is zero on that "
                                        f"boundary; {loose.size} boundary nodes are not fixed, the mesh spans "
                                        f"{lo.tolist()} to {hi.tolist()}")
    if ncomp > 1:
        _check_rigid_modes(case, fm, fixed)
    return fixed, value[fixed]


def _check_rigid_modes(case, fm: FEMesh, fixed: np.ndarray) -> None:
    """The fixed DOFs must stop every rigid-body motion (3 in 2D, 6 in 3D: the stiffness matrix's null space): the
    rigid-body modes restricted to the fixed DOFs have full column rank, else the matrix is singular."""
    pts = fm.dofmap.points
    centre = pts.mean(axis=0)
    modes = fe_assembly.rigid_body_modes((pts - centre) / max(fm.mesh.size(), 1e-300))[fixed]
    k = modes.shape[1]
    if modes.shape[0] >= k:
        s = np.linalg.svd(modes, compute_uv=False)
        if s[-1] > 1e-9 * s[0]:
            return
    raise CaseError.invalid("boundary.dirichlet", common.dirichlet_values(case),
                            f"conditions that hold the body (all {k} rigid-body motions stopped)",
                            why="the fixed displacements leave a rigid-body motion free, so the stiffness matrix is "
                                "singular (no unique solution)")


# ----------------------------------------------------------------------------------------------
# what problem._assemble asks of a mesh kind

class SimplexPath:
    """``problem._assemble``'s questions answered for an :class:`FEMesh`."""

    coefficient = staticmethod(coefficient_per_cell)
    upload = staticmethod(upload)
    element_system = staticmethod(element_system)
    fused_matrix = staticmethod(fused_matrix)
    neumann_parts = staticmethod(neumann_parts)
    fixed_dofs = staticmethod(fixed_dofs)

    @staticmethod
    def shape(case, fm) -> tuple[int, int]:
        ncomp = 1 if case.problem.kind == "poisson" else fm.dim
        return ncomp, fm.n_points * ncomp

    @staticmethod
    def discrete(mesh, dmesh, **parts) -> common.Discrete:
        return common.Discrete(mesh, device_mesh=dmesh, **parts)


# ----------------------------------------------------------------------------------------------
# norms (where the FEMesh is: host or device)

def _zero(*coords):
    return 0.0 * coords[0]


def _zero_grad(*coords):
    return tuple(0.0 * c for c in coords)


def error_norms(fm: FEMesh, u, exact, grad_exact) -> tuple[float, float]:
    """(L2 error, H1-seminorm error) of the scalar field ``u`` (at fm's DOFs) against an exact solution; the exact
    solution's L2 norm of the same pass is kept on ``fm`` for :func:`exact_l2_norm` (the judge's scale: no second
    pass over the cells)."""
    xp = get_array_module(fm.mesh.points)
    l2, h1, norm = fe_assembly.error_norms(fm.mesh, fm.dofmap, fm.element, xp.asarray(u), exact, grad_exact,
                                           with_exact=True)
    fm.exact_norms[id(exact)] = (exact, norm)
    return l2, h1


def exact_l2_norm(fm: FEMesh, exact) -> float:
    """||u||_L2 of an exact solution by the quadrature of :func:`error_norms` (kept from an earlier pass of it on
    this mesh where there was one)."""
    kept = fm.exact_norms.get(id(exact))
    if kept is not None and kept[0] is exact:
        return kept[1]
    xp = get_array_module(fm.mesh.points)
    return error_norms(fm, xp.zeros(fm.n_points), exact, _zero_grad)[0]


def l2_norm(fm: FEMesh, v) -> float:
    """||v||_L2 of a field at fm's DOFs, (n,) or (n, k) (components summed)."""
    xp = get_array_module(fm.mesh.points)
    v = xp.asarray(v, dtype=xp.float64)
    cols = [v] if v.ndim == 1 else [v[:, k] for k in range(v.shape[1])]
    return float(np.sqrt(sum(error_norms(fm, c, _zero, _zero_grad)[0] ** 2 for c in cols)))

