"""A generated family of hard SPD systems for algebraic multigrid: rotated anisotropic diffusion (FD and Q1 FE
stencils), coefficient jumps (checkerboards, random inclusions, a log-normal field), plane-strain elasticity on
Cook's membrane (compressible to nearly incompressible, with and without the rigid-body modes), 3D P1 elasticity on
a cantilever beam of tetrahedra (with and without the six rigid-body modes), 3D Laplacians (isotropic and
anisotropic) and unstructured Delaunay meshes (P1 stiffness, graph Laplacians).

Every member is a :class:`FamilyProblem` (a :class:`~hpcsolve.fem.discrete.testproblems.Problem` with the exact
solution): Dirichlet unknowns eliminated (rows and columns), so the matrix is symmetric positive definite in float64,
and ``b = A x_true`` with a seeded standard-normal ``x_true``. :func:`members` lists them lazily by a short stable
name, so a study builds one at a time; ``scale`` picks the size (:data:`UNKNOWNS` gives each scale's range).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from pyamg.gallery import diffusion_stencil_2d, poisson, stencil_grid
from scipy.ndimage import gaussian_filter
from scipy.spatial import Delaunay

from hpcsolve.fem.discrete import assembly, fe_assembly, simplex_gen
from hpcsolve.fem.discrete import mesh as meshmod
from hpcsolve.fem.discrete import testproblems as tp
from hpcsolve.fem.discrete.elements import element
from hpcsolve.fem.linalg.precond.geometric import StructuredGrid

#: the documented number of unknowns of every member at each scale: small for tests, medium for a CPU study,
#: large for a GPU study
UNKNOWNS = {"small": (2_000, 20_000), "medium": (60_000, 150_000), "large": (500_000, 2_000_000)}

#: per scale: cells per side of the 2D unit-square members, cells per side of Cook's membrane (2 unknowns per
#: node), nodes per side of the 3D cube, cells n across the 3D beam (4n x n x n cells, 3 unknowns per node:
#: 12 n (n + 1)^2 free), random interior points of the Delaunay meshes
SIZES = {
    "small": {"cells": 128, "cook": 48, "cube": 20, "beam": 8, "points": 8_000},
    "medium": {"cells": 256, "cook": 192, "cube": 48, "beam": 20, "points": 100_000},
    "large": {"cells": 1024, "cook": 640, "cube": 100, "beam": 44, "points": 1_000_000},
}

ANGLES_DEG = (0, 30, 45, 60, 90)
#: contrasts of the checkerboards at 4-cell blocks, and block sizes (cells) at contrast 1e6
CHECKER_CONTRASTS = (1e2, 1e4, 1e6, 1e8)
CHECKER_BLOCKS = (1, 4, 16, 64)
POISSON_RATIOS = (0.3, 0.45, 0.49)
BEAM_POISSON_RATIOS = (0.3, 0.45)


@dataclass
class FamilyProblem(tp.Problem):
    """A :class:`~hpcsolve.fem.discrete.testproblems.Problem` with its exact solution (``b = A @ x_true``) and the
    family it belongs to (``anisotropic``, ``jumps``, ``elasticity``, ``elasticity3d``, ``3d``, ``unstructured``)."""

    x_true: np.ndarray | None = None
    family: str = ""


def _power_of_ten(x: float) -> str:
    """1e-3 -> "1e-3" (the names' spelling: short and stable)."""
    return f"1e{round(math.log10(x))}"


def _aniso_name(epsilon: float, degrees: float, kind: str) -> str:
    return f"aniso-{kind.lower()}-eps{_power_of_ten(epsilon)}-{degrees:g}deg"


def _checker_name(contrast: float, block_cells: int) -> str:
    return f"checker-c{_power_of_ten(contrast)}-b{block_cells}"


def _cook_name(poisson_ratio: float, rigid_body_modes: bool) -> str:
    return f"cook-nu{poisson_ratio:g}-{'rbm' if rigid_body_modes else 'nonull'}"


def _beam_name(poisson_ratio: float, rigid_body_modes: bool) -> str:
    return f"beam3d-nu{poisson_ratio:g}-{'rbm' if rigid_body_modes else 'nonull'}"


def _aniso3d_name(epsilon: float) -> str:
    return f"aniso3d-eps{_power_of_ten(epsilon)}"


def _graph_name(weighted: bool) -> str:
    return "delaunay-graph-weighted" if weighted else "delaunay-graph"


def _int32(A) -> sp.csr_matrix:
    """CSR with sorted int32 indices, float64 values (the project's matrix format)."""
    A = sp.csr_matrix(A, dtype=np.float64)
    A.sum_duplicates()
    A.sort_indices()
    return sp.csr_matrix((A.data, A.indices.astype(np.int32), A.indptr.astype(np.int32)), shape=A.shape)


def _finish(problem: tp.Problem, name: str, family: str, seed: int, near_nullspace="keep") -> FamilyProblem:
    """``problem`` renamed, with a seeded exact solution and ``b = A x_true`` (the member's name is in the seed, so
    two members of the same size do not share it)."""
    A = _int32(problem.A)
    x_true = np.random.default_rng([seed, zlib.crc32(name.encode())]).standard_normal(A.shape[0])
    nns = problem.near_nullspace if isinstance(near_nullspace, str) else near_nullspace
    return FamilyProblem(name, A, A @ x_true, problem.grid, nns, x_true=x_true, family=family)


# ---- anisotropic diffusion: pyamg's rotated stencils on the interior nodes of a square (Dirichlet all round)

def anisotropic_stencil(cells: int, epsilon: float, degrees: float, kind: str, seed: int = 1) -> FamilyProblem:
    """-div(Q diag(1, epsilon) Q^T grad u), Q the rotation by ``degrees``, discretised by pyamg's 3 x 3 stencil
    (``kind`` "FD": 2nd-order finite differences; "FE": bilinear Q1 elements) on the (cells - 1)^2 interior nodes
    of the unit square. The stencil cut at the boundary is the Dirichlet elimination, and both stencils' symbols
    are positive away from zero frequency (FD: the mixed term's square is epsilon below the product of the others),
    so the matrix is SPD."""
    m = cells - 1
    A = stencil_grid(diffusion_stencil_2d(epsilon, math.radians(degrees), kind), (m, m), format="csr")
    name = _aniso_name(epsilon, degrees, kind)
    return _finish(tp.Problem(name, A, np.zeros(0), tp.fd_grid(m)), name, "anisotropic", seed)


# ---- coefficient jumps: P1 on the unit square, one conductivity per triangle (exact for piecewise constants)

def checkerboard(cells: int, contrast: float, block_cells: int, seed: int = 1) -> FamilyProblem:
    """Conductivity 1 and ``contrast`` on a checkerboard of ``block_cells`` x ``block_cells``-cell squares
    (``testproblems.jumps`` with cells / block_cells blocks a side)."""
    name = _checker_name(contrast, block_cells)
    return _finish(tp.jumps(cells, contrast, blocks=max(1, cells // block_cells)), name, "jumps", seed)


def _scalar_p1(cells: int, conductivity_of: Callable[[np.ndarray], np.ndarray], name: str, seed: int) -> FamilyProblem:
    """P1 -div(k grad u) on the unit square, ``cells`` a side, k per triangle from its centroid, u = 0 around."""
    m = meshmod.rectangle(cells, cells)
    k = conductivity_of(m.points[m.triangles].mean(axis=1))
    A, _, free = tp._dirichlet_all(m, assembly.stiffness(m, k))
    return _finish(tp.Problem(name, A, np.zeros(0), StructuredGrid(cells, cells, free)), name, "jumps", seed)


def inclusions(cells: int, contrast: float = 1e6, count: int = 24, geometry_seed: int = 5, seed: int = 1) -> FamilyProblem:
    """Conductivity ``contrast`` inside ``count`` random circles (radii 0.03-0.08, seeded: the same geometry at
    every scale), 1 outside."""
    rng = np.random.default_rng(geometry_seed)
    centres, radii = rng.random((count, 2)), rng.uniform(0.03, 0.08, count)

    def conductivity(c):
        inside = np.zeros(len(c), dtype=bool)
        for (x, y), r in zip(centres, radii):
            inside |= (c[:, 0] - x) ** 2 + (c[:, 1] - y) ** 2 < r * r
        return np.where(inside, contrast, 1.0)

    return _scalar_p1(cells, conductivity, f"inclusions-c{_power_of_ten(contrast)}", seed)


def lognormal(cells: int, variance: float = 4.0, correlation: float = 1 / 64, field_seed: int = 3,
              seed: int = 1) -> FamilyProblem:
    """k = exp(g), g a Gaussian field of the given variance: seeded white noise per cell smoothed by a Gaussian of
    width ``correlation`` (a fraction of the side), rescaled to zero mean (variance 4: k spans about 1e7)."""
    noise = np.random.default_rng(field_seed).standard_normal((cells, cells))
    g = gaussian_filter(noise, sigma=max(correlation * cells, 0.5), mode="wrap")
    g = (g - g.mean()) / g.std() * math.sqrt(variance)

    def conductivity(c):
        ix = np.minimum((c[:, 0] * cells).astype(int), cells - 1)
        iy = np.minimum((c[:, 1] * cells).astype(int), cells - 1)
        return np.exp(g[iy, ix])

    return _scalar_p1(cells, conductivity, f"lognormal-var{variance:g}", seed)


# ---- elasticity

def cook_elasticity(cells: int, poisson_ratio: float, rigid_body_modes: bool, seed: int = 1) -> FamilyProblem:
    """P1 plane strain on Cook's membrane (``testproblems.cook``), clamped at x = 0; the three rigid-body modes as
    the near-null space, or none (``rigid_body_modes`` False: smoothed aggregation sees constants only)."""
    name = _cook_name(poisson_ratio, rigid_body_modes)
    problem = tp.cook(cells, poisson_ratio)
    return _finish(problem, name, "elasticity", seed, near_nullspace=problem.near_nullspace if rigid_body_modes else None)


def beam_elasticity(cells: int, poisson_ratio: float, rigid_body_modes: bool, seed: int = 1) -> FamilyProblem:
    """3D P1 linear elasticity (E = 1) on the cantilever beam [0, 4] x [0, 1] x [0, 1]: ``simplex_gen.box`` with
    4 cells x cells x cells hexahedra of 6 tetrahedra each, all three components clamped on the face x = 0 ("left");
    the six rigid-body modes on the free DOFs as the near-null space, or none (``rigid_body_modes`` False)."""
    name = _beam_name(poisson_ratio, rigid_body_modes)
    mesh = simplex_gen.box(4 * cells, cells, cells, x=(0.0, 4.0))
    K = fe_assembly.elasticity_stiffness(mesh, simplex_gen.dofmap(mesh, 1), element(3, 1), 1.0, poisson_ratio, "3d")
    left = np.unique(mesh.facets[mesh.facet_tags == "left"])
    A, _, free = tp._dirichlet_all(mesh, K, ncomp=3, fixed_nodes=left)
    nns = fe_assembly.rigid_body_modes(mesh.points)[free] if rigid_body_modes else None
    return _finish(tp.Problem(name, A, np.zeros(0)), name, "elasticity3d", seed, near_nullspace=nns)


# ---- 3D

def poisson3d(nodes: int, seed: int = 1) -> FamilyProblem:
    """The 7-point Laplacian on nodes^3 interior nodes of a cube (pyamg.gallery.poisson), Dirichlet all round."""
    return _finish(tp.Problem("poisson3d", poisson((nodes,) * 3, format="csr"), np.zeros(0)), "poisson3d", "3d", seed)


def anisotropic3d(nodes: int, epsilon: float, seed: int = 1) -> FamilyProblem:
    """The 7-point Laplacian with the z couplings scaled by ``epsilon`` (strong x-y planes, weak between them)."""
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(nodes, nodes), format="csr")
    eye = sp.identity(nodes, format="csr")
    A = epsilon * sp.kron(T, sp.kron(eye, eye)) + sp.kron(eye, sp.kron(T, eye)) + sp.kron(eye, sp.kron(eye, T))
    name = _aniso3d_name(epsilon)
    return _finish(tp.Problem(name, A, np.zeros(0)), name, "3d", seed)


# ---- unstructured: Delaunay triangulations of random points

def delaunay_mesh(points: int, seed: int = 7) -> meshmod.Mesh:
    """A Delaunay triangulation of ``points`` uniform random points in the unit square plus about sqrt(points)
    evenly spaced points on each side (the boundary, where u = 0). Uniform points make slivers: triangles of
    widely varying shape and size, unlike any structured grid."""
    rng = np.random.default_rng(seed)
    s = np.linspace(0.0, 1.0, math.ceil(math.sqrt(points)) + 1)[:-1]
    side = np.concatenate([np.c_[s, 0 * s], np.c_[1 + 0 * s, s], np.c_[1 - s, 1 + 0 * s], np.c_[0 * s, 1 - s]])
    xy = np.concatenate([side, rng.random((points, 2))])
    tris = meshmod._orient(xy, Delaunay(xy).simplices.astype(np.int32))
    edges = meshmod.boundary_edges_of(tris)
    return meshmod.Mesh(xy, tris, edges, np.full(len(edges), "boundary"), source=f"delaunay {points}")


def delaunay_p1(points: int, seed: int = 1) -> FamilyProblem:
    """The P1 stiffness (Laplacian) on :func:`delaunay_mesh`, boundary nodes eliminated."""
    mesh = delaunay_mesh(points)
    A, _, _ = tp._dirichlet_all(mesh, assembly.stiffness(mesh))
    return _finish(tp.Problem("delaunay-p1", A, np.zeros(0)), "delaunay-p1", "unstructured", seed)


def delaunay_graph(points: int, weighted: bool = False, weight_seed: int = 11, seed: int = 1) -> FamilyProblem:
    """The graph Laplacian D - W of :func:`delaunay_mesh`'s edges (weights 1, or ``weighted``: log-uniform in
    [1e-3, 1e3], seeded), boundary nodes eliminated: a principal submatrix of a connected graph's Laplacian
    without at least one node, so SPD."""
    mesh = delaunay_mesh(points)
    n = mesh.n_points
    code = np.unique(meshmod.triangle_edges(mesh.triangles) @ np.array([n, 1]))     # each edge once, sorted
    e = np.stack([code // n, code % n], axis=1)
    w = 10.0 ** np.random.default_rng(weight_seed).uniform(-3, 3, len(e)) if weighted else np.ones(len(e))
    W = sp.coo_matrix((np.r_[w, w], (np.r_[e[:, 0], e[:, 1]], np.r_[e[:, 1], e[:, 0]])), shape=(n, n)).tocsr()
    L = (sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W).tocsr()
    A, _, _ = tp._dirichlet_all(mesh, L)
    name = _graph_name(weighted)
    return _finish(tp.Problem(name, A, np.zeros(0)), name, "unstructured", seed)


# ---- the family

def members(scale: str = "small", seed: int = 1) -> list[tuple[str, Callable[[], FamilyProblem]]]:
    """The family at one scale, lazily: (name, build) pairs, ``build()`` making the member.

    Parameters
    ----------
    scale : str
        'small' (2k-20k unknowns: tests, each member built in well under a second), 'medium' (60k-150k: a CPU
        study) or 'large' (0.5-2 M: a GPU study); :data:`UNKNOWNS` holds the ranges, :data:`SIZES` the sizes.
    seed : int
        Seed of the exact solutions (mixed with each member's name).

    Returns
    -------
    list of (str, callable)
        43 members in a fixed order, each name short, unique and the same at every scale:
        ``aniso-{fd,fe}-eps1e-3-{0,30,45,60,90}deg`` and ``eps1e-1``/``eps1e-5`` at 30 and 45 degrees,
        ``checker-c1e6-b{1,4,16,64}`` and ``checker-c{1e2,1e4,1e8}-b4`` (b: block size in cells),
        ``inclusions-c1e6``, ``lognormal-var4``, ``cook-nu{0.3,0.45,0.49}-{rbm,nonull}``,
        ``beam3d-nu{0.3,0.45}-{rbm,nonull}`` (3D elasticity, clamped at one end), ``poisson3d``,
        ``aniso3d-eps{1e-2,1e-3}``, ``delaunay-p1``, ``delaunay-graph``, ``delaunay-graph-weighted``.

    Raises
    ------
    ValueError
        An unknown scale.

    Examples
    --------
    >>> family = dict(members("small"))
    >>> problem = family["checker-c1e6-b16"]()
    >>> problem.n, problem.family
    (16129, 'jumps')
    """
    if scale not in SIZES:
        raise ValueError(f"scale: {scale!r}; allowed: {', '.join(SIZES)}")
    size = SIZES[scale]
    cells, cook, cube, beam, points = size["cells"], size["cook"], size["cube"], size["beam"], size["points"]
    out = []

    def add(name, build, *args):
        out.append((name, lambda: build(*args, seed=seed)))

    for kind in ("FD", "FE"):
        for degrees in ANGLES_DEG:
            add(_aniso_name(1e-3, degrees, kind), anisotropic_stencil, cells, 1e-3, degrees, kind)
        for epsilon in (1e-1, 1e-5):
            for degrees in (30, 45):
                add(_aniso_name(epsilon, degrees, kind), anisotropic_stencil, cells, epsilon, degrees, kind)
    for block in CHECKER_BLOCKS:
        add(_checker_name(1e6, block), checkerboard, cells, 1e6, block)
    for contrast in CHECKER_CONTRASTS:
        if contrast != 1e6:
            add(_checker_name(contrast, 4), checkerboard, cells, contrast, 4)
    add("inclusions-c1e6", inclusions, cells)
    add("lognormal-var4", lognormal, cells)
    for nu in POISSON_RATIOS:
        for modes in (True, False):
            add(_cook_name(nu, modes), cook_elasticity, cook, nu, modes)
    for nu in BEAM_POISSON_RATIOS:
        for modes in (True, False):
            add(_beam_name(nu, modes), beam_elasticity, beam, nu, modes)
    add("poisson3d", poisson3d, cube)
    for epsilon in (1e-2, 1e-3):
        add(_aniso3d_name(epsilon), anisotropic3d, cube, epsilon)
    add("delaunay-p1", delaunay_p1, points)
    for weighted in (False, True):
        add(_graph_name(weighted), delaunay_graph, points, weighted)
    return out


def member(name: str, scale: str = "small", seed: int = 1) -> FamilyProblem:
    """Build one member by name (:func:`members`' names); a KeyError names the members."""
    family = dict(members(scale, seed))
    if name not in family:
        raise KeyError(f"{name!r} is not a member; members: {', '.join(family)}")
    return family[name]()
