"""What both assembly paths (P1 triangles: :mod:`problem`; P2 and tetrahedra: :mod:`simplex_problem`) read from an
FEM case: the named manufactured solutions, the P1 path's meshes, the where tables' coordinate predicates, the
Dirichlet values as the messages quote them, and the assembled system (:class:`Discrete`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hpcsolve.core.backends import get_array_module
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete import assembly
from hpcsolve.fem.discrete import mesh as meshmod
from hpcsolve.fem.discrete.mesh import Mesh


# ----------------------------------------------------------------------------------------------
# manufactured solutions (named, never code from the case file)

# array-module generic (NumPy or CuPy coordinate arrays)

def _sin_sin(x, y):
    xp = get_array_module(x)
    return xp.sin(np.pi * x) * xp.sin(np.pi * y)


def _sin_sin_grad(x, y):
    xp = get_array_module(x)
    sx, sy = xp.sin(np.pi * x), xp.sin(np.pi * y)
    return (np.pi * xp.cos(np.pi * x) * sy, np.pi * sx * xp.cos(np.pi * y))


def _sin_sin_source(x, y):
    return 2.0 * np.pi ** 2 * _sin_sin(x, y)


def _sin3(x, y, z):
    xp = get_array_module(x)
    return xp.sin(np.pi * x) * xp.sin(np.pi * y) * xp.sin(np.pi * z)


def _sin3_grad(x, y, z):
    xp = get_array_module(x)
    sx, sy, sz = xp.sin(np.pi * x), xp.sin(np.pi * y), xp.sin(np.pi * z)
    cx, cy, cz = xp.cos(np.pi * x), xp.cos(np.pi * y), xp.cos(np.pi * z)
    return (np.pi * cx * sy * sz, np.pi * sx * cy * sz, np.pi * sx * sy * cz)


def _sin3_source(x, y, z):
    return 3.0 * np.pi ** 2 * _sin3(x, y, z)


#: (u, grad u, f for k = 1) by the name problem.manufactured gives
MANUFACTURED = {"sin_sin": (_sin_sin, _sin_sin_grad, _sin_sin_source),
                "sin_sin_sin": (_sin3, _sin3_grad, _sin3_source)}


# ----------------------------------------------------------------------------------------------
# the P1 path's mesh

def triangle_mesh(case) -> Mesh:
    """The case's triangle mesh (rectangle, cook_membrane or a file), refined mesh.refine times."""
    m = case.mesh
    if m.kind == "rectangle":
        mesh = meshmod.rectangle(m.nx, m.ny or m.nx, tuple(m.x), tuple(m.y))
    elif m.kind == "cook_membrane":
        mesh = meshmod.cook_membrane(m.nx)
    else:
        p = Path(m.path)
        if not p.is_absolute():
            p = case.base_dir / p
        mesh = meshmod.read_mesh(p)
        mesh.node_parts()           # on the file's mesh: its refinements carry the parts (checked on every file mesh)
    for _ in range(m.refine):
        mesh = meshmod.refine_uniform(mesh)
    return mesh


# ----------------------------------------------------------------------------------------------
# where tables

def coord_mask(where, xy: np.ndarray, tol: float, circle_ok: bool = True) -> np.ndarray:
    """The points (n, 2 or 3) that a where table's coordinate keys select (z keys: on 3D points only; the case
    validation refuses them on a 2D mesh)."""
    x, y = xy[:, 0], xy[:, 1]
    mask = np.ones(len(xy), dtype=bool)
    for axis, name in enumerate("xyz"[:xy.shape[1]]):
        c = xy[:, axis]
        equal, low, high = (getattr(where, name + suffix) for suffix in ("", "_min", "_max"))
        if equal is not None:
            mask &= np.abs(c - equal) <= tol
        if low is not None:
            mask &= c >= low - tol
        if high is not None:
            mask &= c <= high + tol
    if where.circle is not None:
        cx, cy, r = where.circle
        d = np.hypot(x - cx, y - cy)
        mask &= (np.abs(d - r) <= tol) if circle_ok else (d <= r + tol)
    return mask


def where_tags(where) -> list[str] | None:
    if where.tag is None:
        return None
    return [where.tag] if isinstance(where.tag, str) else list(where.tag)


def dirichlet_values(case) -> list:
    """The Dirichlet conditions' values as the case gives them (quoted by messages)."""
    return [bc.value if bc.value is not None else bc.displacement or (bc.ux, bc.uy, bc.uz)[:2 + (bc.uz is not None)]
            for bc in case.boundary.dirichlet]


# ----------------------------------------------------------------------------------------------
# the assembled system

@dataclass
class Discrete:
    mesh: Mesh                      # or the generic path's simplex_problem.FEMesh
    kind: str                       # poisson | elasticity
    ncomp: int                      # unknowns per node
    A: object                       # free-DOF block (SPD): SciPy CSR, or a DeviceCSR (assembled on a device)
    b: np.ndarray                   # right-hand side of the free DOFs (Dirichlet lifted)
    free: np.ndarray
    fixed: np.ndarray
    fixed_values: np.ndarray
    coefficient: np.ndarray         # conductivity or Young's modulus per cell
    exact: tuple | None = None      # (u, grad u) of a manufactured solution
    timings: dict = field(default_factory=dict)
    device_mesh: object = None      # device.DeviceMesh where the system was assembled on a device
    # 2-norm of each right-hand-side contribution and of the matrix, by the case field responsible
    scales: dict = field(default_factory=dict)

    @property
    def n_dofs(self) -> int:
        return self.mesh.n_points * self.ncomp

    def full_solution(self, x_free: np.ndarray) -> np.ndarray:
        u = assembly.expand(x_free, self.free, self.fixed, self.fixed_values, self.n_dofs)
        return u.reshape(-1, self.ncomp) if self.ncomp > 1 else u


def select_boundary(points: np.ndarray, entities: np.ndarray, tags: np.ndarray, tag_names: list[str], where,
                    field: str, what: str, tol: float) -> np.ndarray:
    """The mask of the boundary ``entities`` (k, nodes: edges or facets, with their ``tags``) a where table selects:
    the tag matches (a tag no entity has is a CaseError naming ``field``.where.tag) and every node satisfies the
    coordinate keys."""
    keep = np.ones(len(entities), dtype=bool)
    wanted = where_tags(where)
    if wanted is not None:
        unknown = [t for t in wanted if t not in tag_names]
        if unknown:
            raise CaseError.invalid(f"{field}.where.tag", unknown[0] if len(unknown) == 1 else unknown,
                                    ", ".join(tag_names), why=f"no boundary {what} has this tag in the mesh")
        keep &= np.isin(tags, wanted)
    for j in range(entities.shape[1]):
        keep &= coord_mask(where, points[entities[:, j]], tol)
    return keep


def collect_fixed(case, points: np.ndarray, ncomp: int, parts) -> tuple[np.ndarray, np.ndarray]:
    """(owner, value) over every DOF: the index of the Dirichlet condition that fixes it (-1: free) and its value,
    from ``parts`` ((index, dofs, values, component name) per condition, in the case's order). Two conditions that
    fix a DOF to different values are refused (one would silently win), naming both and the first node."""
    owner = np.full(len(points) * ncomp, -1, dtype=np.int64)
    value = np.zeros(owner.size)
    for i, dofs, vals, name in parts:
        prev = owner[dofs]
        clash = (prev >= 0) & (value[dofs] != vals)
        if clash.any():
            j = int(prev[clash][0])
            sel = clash & (prev == j)
            _refuse_overlap(case, points, ncomp, i, j, dofs[sel], name, float(value[dofs[sel][0]]), float(vals[0]))
        owner[dofs], value[dofs] = i, vals
    return owner, value


def _refuse_overlap(case, points, ncomp: int, i: int, j: int, dofs, name: str, old: float, new: float) -> None:
    """boundary.dirichlet[i] fixes ``name`` (to ``new``) on the DOFs ``dofs`` that boundary.dirichlet[j] fixed to
    ``old``."""
    nodes = np.unique(dofs // ncomp)
    at = ", ".join(f"{c:g}" for c in points[nodes[0]])
    bcs = case.boundary.dirichlet
    where_i, where_j = (bcs[k].where.model_dump(exclude_none=True, exclude_defaults=True) for k in (i, j))
    raise CaseError.invalid(
        f"boundary.dirichlet[{i}]", dirichlet_values(case)[i],
        f"conditions that agree on the nodes they share (or boundary.dirichlet[{i}].where and "
        f"boundary.dirichlet[{j}].where that share no node)",
        why=f"boundary.dirichlet[{j}] (where {where_j}) fixes {name} = {old:g} and boundary.dirichlet[{i}] (where "
            f"{where_i}) {name} = {new:g} on the same {nodes.size} node(s), first at ({at}); the later one "
            "would silently win")


def coefficient_per_cell(case, centroids: np.ndarray, cell_regions, size: float, what: str) -> np.ndarray:
    """The conductivity (poisson) or Young's modulus per cell: the problem's value, overridden by each of
    problem.regions on the cells whose centroid its where table selects (tag: the mesh's region names); a region
    that selects none, or names a region the mesh lacks, is a CaseError naming it. ``what``: the cells' name."""
    p = case.problem
    key = "conductivity" if p.kind == "poisson" else "young"
    coef = np.full(len(centroids), float(getattr(p, key)))
    for i, r in enumerate(p.regions):
        field, where = f"problem.regions[{i}]", r.where
        keep = coord_mask(where, centroids, where.tol if where.tol is not None else 1e-6 * size, circle_ok=False)
        tags = where_tags(where)
        if tags is not None:
            have = sorted(set(cell_regions.tolist())) if cell_regions is not None else []
            unknown = [t for t in tags if t not in have]
            if unknown:
                raise CaseError.invalid(f"{field}.where.tag", unknown[0], ", ".join(have) or "(this mesh has no "
                                        "regions)", why=f"no {what} has this region name")
            keep &= np.isin(cell_regions, tags)
        if not keep.any():
            raise CaseError.invalid(f"{field}.where", where.model_dump(exclude_none=True),
                                    f"a selection that contains at least one {what}", why=f"selects no {what}")
        coef[keep] = float(getattr(r, key))
    return coef

