"""Peak memory of an FEM run, from the case alone (see :mod:`hpcsolve.core.memory` for the method and
docs/design/reliability.md for the measured table)."""

from __future__ import annotations

from hpcsolve.core import backends
from hpcsolve.core.memory import PLOT_BYTES, MiB, MemoryEstimate, case_plots, gpu_import_bytes
from hpcsolve.fem.choices import components, dimension, fem_mesh_size, resolve_preconditioner


#: resident size before the mesh exists: interpreter, NumPy, SciPy (sparse, SuperLU), h5py
FEM_BASE_BYTES = 70 * MiB
FEM_BASE_GPU_BYTES = 420 * MiB
#: per triangle at the peak (assembly: COO triplets of (3 ncomp)^2 entries as int64 rows, cols and
#: float64 values, their sorted CSR copy, the condensed matrix; the Krylov vectors), by unknowns
#: per node (measured)
FEM_BYTES_PER_TRIANGLE = {1: 440, 2: 1540}
#: a manufactured solution: the 6-point quadrature of the error norms and the exact fields, per triangle
MANUFACTURED_BYTES_PER_TRIANGLE = 240
#: the float64 reference (SuperLU, COLAMD ordering): the factors' fill grows like
#: coefficient * unknowns^power bytes, by unknowns per node (fitted to measured runs)
REFERENCE_FILL = {1: (42.0, 1.30), 2: (786.0, 1.10)}
#: its time, seconds = coefficient * unknowns^1.5 (a 2D sparse direct solve), by unknowns per node: SuperLU with
#: the MMD ordering of A^T + A after reverse Cuthill-McKee, symmetric mode (``hpcsolve.fem.api.factor_solve``); the
#: coefficients sit above the measured runs: docs/measured/notes_calibrations.md ("Reference solve time")
REFERENCE_SECONDS = {1: 2.0e-8, 2: 4.0e-8}
#: tetrahedral meshes: seconds = coefficient * unknowns^2 (a 3D direct solve's fill grows faster; SciPy's spsolve of
#: a 7-point Laplacian: 0.44 s at 8,000 unknowns, 1.14 s at 13,824, exponent 1.75 rising; 2-core development
#: machine), the coefficient above the measured runs
REFERENCE_SECONDS_3D = 1.0e-8


def reference_seconds(case, unknowns: int) -> float:
    """The float64 reference's predicted seconds (SuperLU on the host)."""
    if dimension(case) == 3:
        return REFERENCE_SECONDS_3D * float(unknowns) ** 2
    return REFERENCE_SECONDS[min(components(case), 2)] * float(unknowns) ** 1.5
#: the reference's time budget when the case does not set solve.reference_max_seconds: solve.reference = "auto"
#: skips it (with a note) where its predicted time is above this
REFERENCE_MAX_SECONDS = 30.0


def reference_plan(case, unknowns: int) -> tuple[bool, float, str]:
    """(whether the run makes the float64 reference, its predicted seconds, a one-line note when it does not).
    "always" forces it; "auto" makes it up to solve.reference_max_dofs unknowns and when its predicted time is
    within solve.reference_max_seconds (REFERENCE_MAX_SECONDS where the case has no such field)."""
    s = case.solve
    predicted = reference_seconds(case, unknowns)
    if s.reference == "always":
        return True, predicted, ""
    if s.reference == "never":
        return False, predicted, "not made (solve.reference = 'never')"
    budget = float(getattr(s, "reference_max_seconds", None) or REFERENCE_MAX_SECONDS)
    if unknowns > s.reference_max_dofs:
        return False, predicted, (f"skipped: {unknowns:,} unknowns > solve.reference_max_dofs "
                                  f"{s.reference_max_dofs:,} (solve.reference = 'always' forces it)")
    if predicted > budget:
        return False, predicted, (f"skipped: predicted ~{predicted:.3g} s > its budget {budget:g} s "
                                  "(solve.reference_max_seconds; solve.reference = 'always' forces it)")
    return True, predicted, ""


#: GPU device side: CSR matrix (values, int32 columns, row pointers) and 10 Krylov vectors
DEVICE_VECTORS = 10


#: a preconditioner's own bytes (a multigrid hierarchy on the device, pyamg's on the host, the rows of its dense
#: coarsest level) are its spec's ``memory`` (hpcsolve.fem.linalg.precond.registry)
#: mg / amg: the coarsest level (at most ``solve.multigrid.coarse_size`` rows, the bound counted) is inverted dense
#: on the host (``aggregation.coarse_inverse``: the dense matrix, its symmetric part, the pivoted Cholesky factor,
#: its inverse, the result) and stored as a dense CSR level (``layout.dense``: values and int32 indices): at the peak
#: this many float64 copies of rows^2. Measured: VmHWM of ``poisson_manufactured`` mesh.nx = 142 (coarsest level
#: 4,900 rows), numpy, reference off, with coarse_size 5000 against the default 400: 919 MiB more = 5.0 copies
#: (tracemalloc of coarse_inverse + layout.dense at 1,444 rows: 6.3; 2-core development machine)
COARSE_DENSE_COPIES = 5.0


#: matrix entries per node and unknown of a node, by (dimension, element), of an interior row: P1 triangles 7 (the
#: 5-point stencil and a diagonal), the box's tetrahedra 15 (the Kuhn split's 14 neighbours); P2 averaged over vertex
#: and edge nodes (free rows measured: 11.1 at 32^2 P2 triangles, 13.5 at 16^3 P1 and 25.2 at 12^3 P2 tetrahedra,
#: whose boundary rows are shorter)
NNZ_PER_NODE = {(2, "P1"): 7, (2, "P2"): 12, (3, "P1"): 15, (3, "P2"): 27}


def nnz_per_row(case) -> int:
    """Matrix entries per row of the case's system (:data:`NNZ_PER_NODE` times the unknowns per node)."""
    return NNZ_PER_NODE[(dimension(case), case.problem.element)] * components(case)


def estimate(case, backend: str, policy) -> MemoryEstimate:
    """Peak memory of an FEM run of ``case``, from the mesh size the case implies."""
    points, triangles = fem_mesh_size(case)
    ncomp = components(case)
    unknowns = points * ncomp
    # a cell's element matrix grows as its DOFs squared: the P1 triangle's figure scaled (P2, tetrahedra)
    dim = dimension(case)
    local = (dim + 1) * (dim + 2) // 2 if case.problem.element == "P2" else dim + 1
    per_triangle = int(FEM_BYTES_PER_TRIANGLE[min(ncomp, 2)] * (local * ncomp) ** 2 / (3 * min(ncomp, 2)) ** 2)
    if case.problem.kind == "poisson" and case.problem.manufactured:
        per_triangle += MANUFACTURED_BYTES_PER_TRIANGLE
    host = triangles * per_triangle
    reference = reference_plan(case, unknowns)[0]
    if reference:
        coefficient, power = REFERENCE_FILL[min(ncomp, 2)]
        host += coefficient * float(unknowns) ** power
    if case_plots(case):      # the figures are drawn after the solve, when its arrays are free
        host = max(host, PLOT_BYTES)
    spec = resolve_preconditioner(case, None, policy)
    own = spec.memory(unknowns, ncomp, getattr(case.solve, spec.options_field).options() if spec.options_field else {})
    host += own.host_bytes                # e.g. pyamg's hierarchy on the host
    coarse_rows = own.coarse_rows
    coarse = int(COARSE_DENSE_COPIES * coarse_rows**2 * 8)
    reduce = "mesh.refine" if case.mesh.refine else ("mesh.nx" if case.mesh.kind != "file" else "mesh.path")
    device = None
    gpu = backends.get(backend).gpu
    items = {"base": FEM_BASE_GPU_BYTES if gpu else FEM_BASE_BYTES,
             "imports": 0 if gpu else gpu_import_bytes(),     # a GPU backend's libraries are in its base
             "mesh and solve": int(host), "coarse dense level": coarse}
    if gpu:
        nnz = unknowns * nnz_per_row(case)
        device = int(nnz * (policy.storage_bytes + 4 + (8 + 4 if policy.storage_bytes != 8 else 0))
                     + (unknowns + 1) * 4 + DEVICE_VECTORS * unknowns * 8)
        device += own.device_bytes        # a hierarchy, and the Galerkin products while it is built
    basis = (f"{triangles:,} triangles x {per_triangle} B" + (", float64 reference (SuperLU)" if reference else "")
             + (f", dense coarse level of at most {coarse_rows:,} rows" if coarse_rows else ""))
    return MemoryEstimate(int(sum(items.values())), device, reduce, basis, items)
