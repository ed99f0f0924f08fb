"""What an FEM case resolves to before anything is built: the solve method (:mod:`hpcsolve.fem.linalg.methods`), the
preconditioner (:mod:`hpcsolve.fem.linalg.precond.registry`, "auto" resolved), the mesh size (points, triangles), and
the preconditioner object a run builds from them (:func:`make_preconditioner`). Used by the run
(``hpcsolve.fem.runner``), the memory and run-time estimates (``hpcsolve.fem.memory``, ``hpcsolve.fem.estimate``)."""

from __future__ import annotations

from pathlib import Path

from hpcsolve.core import parallel
from hpcsolve.core.errors import CaseError
from hpcsolve.core.precision import Precision
from hpcsolve.core.safe_io import MESH_FILE_MAX_BYTES, gmsh_counts, regular_file
from hpcsolve.fem.linalg import methods
from hpcsolve.fem.linalg.methods import Method
from hpcsolve.fem.linalg.precond import registry
from hpcsolve.fem.linalg.precond.aggregation import rigid_body_modes
from hpcsolve.fem.linalg.precond.base import Preconditioner
from hpcsolve.fem.linalg.precond.geometric import StructuredGrid
from hpcsolve.fem.linalg.precond.registry import AUTO_MULTIGRID_UNKNOWNS, PreconditionerSpec

__all__ = ["AUTO_MULTIGRID_UNKNOWNS", "method_of", "solve_method", "check_method", "preconditioner_spec",
           "preconditioner_name", "resolve_preconditioner", "check_preconditioner", "make_preconditioner",
           "reported_method", "preconditioner_used", "structured_mesh", "fem_mesh_size", "components", "dimension"]


def method_of(case, policy: Precision) -> str:
    """The name of the case's solve method: solve.method, else the precision's default."""
    return solve_method(case, policy).name


def solve_method(case, policy: Precision) -> Method:
    """The case's solve method (solve.method, else the precision's default), checked against the precision: a
    CaseError naming solve.method."""
    return methods.for_precision(policy, case.solve.method, field="solve.method")


def check_method(case, policy: Precision) -> Method:
    """solve.method against the precision and solve.preconditioner (a method that always runs with one preconditioner
    takes no other: ``methods.check_preconditioner``): a CaseError naming the case's field."""
    method = solve_method(case, policy)
    methods.check_preconditioner(method, registry.get(case.solve.preconditioner, "solve.preconditioner").name,
                                 "solve.preconditioner", "solve.method")
    return method


def resolve_preconditioner(case, mesh, policy: Precision) -> PreconditionerSpec:
    """solve.preconditioner with "auto" resolved (``registry.choose_auto``), not yet checked against the mesh."""
    ncomp = components(case)
    situation = registry.Situation(
        method=solve_method(case, policy), named=case.solve.method is not None,
        ranks=parallel.ranks(parallel.world()),
        unknowns=lambda: (mesh.n_points if mesh is not None else fem_mesh_size(case)[0]) * ncomp,
        structured=lambda: structured_mesh(case, mesh))
    return registry.resolve(registry.get(case.solve.preconditioner, "solve.preconditioner"), situation)


def preconditioner_name(case, mesh, policy: Precision) -> str:
    """The name of the preconditioner a run uses (:func:`preconditioner_spec`'s, without the mesh check)."""
    return resolve_preconditioner(case, mesh, policy).name


def preconditioner_spec(case, mesh, policy: Precision) -> PreconditionerSpec:
    """The preconditioner a run uses: solve.preconditioner with "auto" resolved; one that needs a structured grid on
    a mesh without one (a mesh file, or mesh.refine) is a CaseError. ``mesh`` None: judged from the case (the mesh
    not built)."""
    spec = resolve_preconditioner(case, mesh, policy)
    if spec.needs_grid and not structured_mesh(case, mesh):
        source = mesh.source if mesh is not None else f"mesh.kind {case.mesh.kind!r}, mesh.refine {case.mesh.refine}"
        others = [s for s in registry.names() if not registry.get(s).needs_grid and registry.get(s).cycle]
        raise CaseError.invalid("solve.preconditioner", spec.name, f"{' or '.join(others)} (or auto) for this mesh",
                                why=f"{spec.summary} needs a structured generator mesh for P1 elements (mesh.kind "
                                    f"rectangle, cook_membrane, box or thick_cylinder without mesh.refine; P2 runs it "
                                    f"on any mesh); this mesh is {source!r}")
    return spec


#: the name the runner used for preconditioner_spec
check_preconditioner = preconditioner_spec


def make_preconditioner(case, disc, policy: Precision) -> Preconditioner:
    """The preconditioner object of the run (``spec.make``): with the mesh's structured grid where it needs one, the
    rigid-body modes of elasticity where it takes them, the case's options of its section ([solve.multigrid])."""
    spec = preconditioner_spec(case, disc.mesh, policy)
    grid = nns = None
    if spec.near_nullspace and disc.kind == "elasticity":
        nns = rigid_body_modes(disc.mesh.points, disc.free)     # also below the last halvable grid of mg
    if spec.needs_grid and hasattr(disc.mesh, "multigrid_grid"):       # the generic path: P2, tetrahedra
        grid = disc.mesh.multigrid_grid(disc.free, disc.ncomp)
    elif spec.needs_grid:
        g = disc.mesh.info["grid"]
        grid = StructuredGrid(g[0], g[1], disc.free, disc.ncomp)
    if not spec.options_field:
        return spec.make(registry.Inputs(grid=grid, near_nullspace=nns))
    options = getattr(case.solve, spec.options_field).options()
    return spec.make(registry.Inputs(options=options, grid=grid, near_nullspace=nns, field=f"solve.{spec.options_field}"))


def reported_method(case, policy: Precision, preconditioner) -> str:
    """The method as the run's report names it (``hpcsolve.fem.api.solve``): "cg" with the Jacobi preconditioner is
    "pcg-jacobi" there, so validate and dry runs say so too. ``preconditioner``: a spec or a name."""
    return methods.with_preconditioner(solve_method(case, policy), registry.get(preconditioner).name).name


def structured_mesh(case, mesh) -> bool:
    """Whether geometric multigrid ("mg") can run on the case's mesh: P1 on a generator's grid of nodes (rectangle,
    cook_membrane, box, thick_cylinder; refinement renumbers), or P2 on any mesh (a p-multigrid level to the P1
    functions of the same mesh first, then geometric levels on a generator's grid, aggregation otherwise).
    ``mesh`` None: from the case alone."""
    if case.problem.element == "P2":
        return True
    if mesh is None:
        return case.mesh.kind in ("rectangle", "cook_membrane", "box", "thick_cylinder") and not case.mesh.refine
    return bool(mesh.info.get("grid"))


def fem_mesh_size(case) -> tuple[int, int]:
    """(points, cells) of the case's mesh after refinement, from the case (and the header of a mesh file) without
    building it; points are the solution's nodes (P2: the vertices and the edge midpoints)."""
    m = case.mesh
    if m.kind in ("box", "thick_cylinder"):
        nx, ny, nz = m.nx, m.ny or m.nx, m.nz or m.nx
        points = (nx + 1) * (ny + 1) * (nz + 1)
        # six tetrahedra per hexahedron: its 12 axis edges, a diagonal on each face, one through the body
        axis = nx * (ny + 1) * (nz + 1) + (nx + 1) * ny * (nz + 1) + (nx + 1) * (ny + 1) * nz
        faces = nx * ny * (nz + 1) + nx * (ny + 1) * nz + (nx + 1) * ny * nz
        edges = axis + faces + nx * ny * nz
        return points + (edges if case.problem.element == "P2" else 0), 6 * nx * ny * nz
    if m.kind in ("rectangle", "cook_membrane"):
        nx = m.nx
        ny = (m.ny or m.nx) if m.kind == "rectangle" else m.nx
        points, triangles = (nx + 1) * (ny + 1), 2 * nx * ny
    else:
        points, triangles = _file_mesh_size(case)
    edges = points + triangles - 1        # Euler's formula for a planar mesh without holes
    for _ in range(m.refine):
        points, edges, triangles = points + edges, 2 * edges + 3 * triangles, 4 * triangles
    return points + (edges if case.problem.element == "P2" else 0), triangles


def dimension(case) -> int:
    """The space dimension from the case: 3 for the tetrahedral generators, else 2 (a file's until it is read)."""
    return 3 if case.mesh.kind in ("box", "thick_cylinder") else 2


def components(case) -> int:
    """Unknowns per node: 1 (poisson), the space dimension (elasticity)."""
    return 1 if case.problem.kind == "poisson" else dimension(case)


def _file_mesh_size(case) -> tuple[int, int]:
    path = Path(case.mesh.path)
    if not path.is_absolute():
        path = case.base_dir / path
    allowed = "a mesh file meshio can read (2D triangles, e.g. gmsh .msh); relative paths: to the case file"
    st = regular_file(path, "mesh.path", allowed, max_bytes=MESH_FILE_MAX_BYTES)
    if path.suffix.lower() == ".msh":
        counts = gmsh_counts(path, "mesh.path", allowed)
        nodes = counts.get("nodes", 0)
        return nodes, max(counts.get("elements", 0), 2 * nodes)
    nodes = max(1, st.st_size // 24)      # other formats: at least ~24 bytes per node
    return nodes, 2 * nodes


def preconditioner_used(pc, info: dict | None, grid=None) -> tuple[str, str]:
    """(the preconditioner the solve used, a note for the report) from the asked-for ``pc`` (a spec, a name or a
    preconditioner object) and the hierarchy's ``info`` (``Multigrid.info``). Geometric multigrid ("mg") halves the
    grid while its cells are even: on a grid of odd cells (mesh.nx = 255) it builds no geometric level and every level
    is aggregation, which is its ``fallback`` (algebraic multigrid, "amg", the note says why); with some geometric
    levels before the aggregation ones it stays "mg" and the note counts them (a P2 run's p-multigrid level first is
mg's own, with or without geometric levels below). ``grid``: the mesh's cells per axis (2 or 3)."""
    spec = registry.spec_of(pc) if isinstance(pc, Preconditioner) else registry.get(pc)
    name = spec.name
    if not spec.needs_grid or not info:
        return name, ""
    kinds = list(info.get("level_kinds") or [])
    geometric, aggregation = kinds.count("geometric"), kinds.count("aggregation")
    if not aggregation:
        return name, ""
    amg = f" ({info['amg']})" if info.get("amg") else ""
    plural = lambda n, what: f"{n} {what} level{'s' if n > 1 else ''}"          # noqa: E731
    p_level = "a p-multigrid level to P1, then " if kinds and kinds[0] == "p-coarsening" else ""
    if p_level and not geometric:       # P2 on a mesh without a grid of vertices: aggregation below its P1 level
        return name, f"{name}: {p_level}{plural(aggregation, 'aggregation')}{amg} (the P1 vertices have no grid to halve)"
    sizes = [int(c) for c in grid] if grid is not None else None
    cells = f"the {' x '.join(map(str, sizes))}-cell grid" if sizes else "the grid"
    if not geometric and spec.fallback:
        return spec.fallback, (f"{name} fell back to aggregation AMG{amg}: {cells} cannot be halved (geometric multigrid "
                               "needs an even number of cells a side), so every level is aggregation; for geometric "
                               "levels choose mesh.nx (and mesh.ny, mesh.nz) divisible by a power of two, or ask for "
                               f"solve.preconditioner = '{spec.fallback}'")
    coarse = f"the {' x '.join(str(c >> geometric) for c in sizes)}-cell grid" if sizes else "a grid"
    return name, (f"{name}: {p_level}{plural(geometric, 'geometric')}, then {plural(aggregation, 'aggregation')}{amg} "
                  f"below {coarse}, which cannot be halved")
