"""What an FEM case resolves to before anything is built: the Krylov method, the preconditioner ("auto"
resolved) and the mesh size (points, triangles). Used by the run (``hpcsolve.fem.runner``) and by the memory
estimate (``hpcsolve.fem.memory``)."""

from __future__ import annotations

from pathlib import Path

from hpcsolve.core import parallel
from hpcsolve.core.precision import Precision
from hpcsolve.core.safe_io import MESH_FILE_MAX_BYTES, gmsh_counts, regular_file


def method_of(case, policy: Precision) -> str:
    return case.solve.method or policy.fem_method


#: "auto" picks multigrid from this many unknowns on: below it the V-cycle's set-up and launch latency
#: cost more than the Krylov iterations it saves (H200, docs/design/fem_multigrid.md: shipped cases of 2-4k
#: unknowns 3-10 ms with jacobi against 20-25 ms with mg/amg; Poisson 255^2 10.8 ms plain CG against
#: 32 ms for mg's set-up and solve; 1023^2 163 ms against 14 ms + set-up)
AUTO_MULTIGRID_UNKNOWNS = 200_000


def preconditioner_name(case, mesh, policy: Precision) -> str:
    """The preconditioner a run uses: solve.preconditioner, with "auto" resolved: jacobi below
    AUTO_MULTIGRID_UNKNOWNS unknowns (and for method pcg-jacobi), above it mg on a structured generator
    mesh and amg otherwise; none for spsolve."""
    s = case.solve
    method = method_of(case, policy)
    if s.preconditioner != "auto":
        return s.preconditioner
    if method == "pcg-jacobi":
        return "jacobi"
    if method == "spsolve" or s.method == "cg":      # plain CG asked for by name: no preconditioner
        return "none"
    if parallel.ranks(parallel.world()) > 1:
        return "jacobi"                               # the multigrid hierarchy is not distributed over ranks
    points = mesh.n_points if mesh is not None else fem_mesh_size(case)[0]
    if points * (1 if case.problem.kind == "poisson" else 2) < AUTO_MULTIGRID_UNKNOWNS:
        return "jacobi"
    return "mg" if structured_mesh(case, mesh) else "amg"


def structured_mesh(case, mesh) -> bool:
    """Whether the mesh's nodes are numbered on a structured grid (what geometric multigrid, "mg", needs).
    ``mesh`` None: from the case alone: the generators number their nodes on a grid, refinement does not."""
    if mesh is None:
        return case.mesh.kind in ("rectangle", "cook_membrane") and not case.mesh.refine
    return bool(mesh.info.get("grid"))


def fem_mesh_size(case) -> tuple[int, int]:
    """(points, triangles) of the case's mesh after refinement, from the case (and the header of a
    mesh file) without building it."""
    m = case.mesh
    if m.kind in ("rectangle", "cook_membrane"):
        nx = m.nx
        ny = (m.ny or m.nx) if m.kind == "rectangle" else m.nx
        points, triangles = (nx + 1) * (ny + 1), 2 * nx * ny
    else:
        points, triangles = _file_mesh_size(case)
    edges = points + triangles - 1        # Euler's formula for a planar mesh without holes
    for _ in range(m.refine):
        points, edges, triangles = points + edges, 2 * edges + 3 * triangles, 4 * triangles
    return points, triangles


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


def preconditioner_used(name: str, info: dict | None, grid=None) -> tuple[str, str]:
    """(the preconditioner the solve used, a note for the report) from the asked-for ``name`` and the hierarchy's
    ``info`` (``Multigrid.info``). Geometric multigrid ("mg") halves the grid while its cells are even: on a grid of
    odd cells (mesh.nx = 255) it builds no geometric level and every level is aggregation, which is algebraic
    multigrid ("amg", the note says why); with some geometric levels before the aggregation ones it stays "mg" and
    the note counts them. ``grid``: the mesh's (nx, ny) cells."""
    if name != "mg" or not info:
        return name, ""
    kinds = list(info.get("level_kinds") or [])
    geometric, aggregation = kinds.count("geometric"), kinds.count("aggregation")
    if not aggregation:
        return name, ""
    nx, ny = (int(grid[0]), int(grid[1])) if grid is not None else (None, None)
    cells = f"the {nx} x {ny}-cell grid" if nx is not None else "the grid"
    amg = f" ({info['amg']})" if info.get("amg") else ""
    if not geometric:
        return "amg", (f"mg fell back to aggregation AMG{amg}: {cells} cannot be halved (geometric multigrid needs an "
                       "even number of cells a side), so every level is aggregation; for geometric levels choose "
                       "mesh.nx (and mesh.ny) divisible by a power of two, or ask for solve.preconditioner = 'amg'")
    coarse = (f"the {nx >> geometric} x {ny >> geometric}-cell grid" if nx is not None else "a grid")
    return name, (f"mg: {geometric} geometric level{'s' if geometric > 1 else ''}, then {aggregation} aggregation "
                  f"level{'s' if aggregation > 1 else ''}{amg} below {coarse}, which cannot be halved")
