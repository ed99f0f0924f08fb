"""FEM case files (``solver = "fem"``): mesh, problem, boundary conditions, solver, output.

Boundary conditions and coefficient regions are selected by a *predicate table* (``where``), never
by code: every key narrows the selection (all keys must hold):

    where = { tag = "left" }                  # boundary tag / physical group name (or a list)
    where = { x = 0.0 }                       # nodes with x == 0 (within tol)
    where = { y_min = 0.5, x_max = 1.0 }      # a box, bounds inclusive
    where = { circle = [1.0, 0.5, 0.25] }     # nodes on the circle (cx, cy, r) (within tol)
    where = { all = true }                    # the whole boundary

An edge is selected when both its end nodes are; ``tol`` defaults to 1e-6 times the mesh diameter.
For coefficient regions the same keys apply to triangle centroids (``tag`` names mesh regions).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from hpcsolve.core.cases import CaseBase, StrictModel
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg import methods
from hpcsolve.fem.linalg.precond import registry
from hpcsolve.fem.linalg.precond.mg_options import HIERARCHIES

#: smallest solve.rtol (float64 round-off); most iterations, outer steps or unknowns a setting may name
MIN_RTOL = 1e-16
MAX_ITERATIONS = 1_000_000_000
#: largest extent of a generated mesh (its squared lengths and areas must stay finite)
MAX_EXTENT = 1e100
#: most boundary conditions, regions and tags in one list
MAX_ITEMS = 256


#: the selecting keys of a where table (besides all = true)
WHERE_KEYS = ("tag", "x", "y", "z", "x_min", "x_max", "y_min", "y_max", "z_min", "z_max", "circle")
#: the keys that need a 3D mesh
WHERE_3D_KEYS = ("z", "z_min", "z_max")


class Where(StrictModel):
    tag: str | list[str] | None = Field(None, max_length=MAX_ITEMS, description="boundary tag(s) or region name(s) from the mesh")
    x: float | None = Field(None, description="x coordinate equals this (within tol)")
    y: float | None = Field(None, description="y coordinate equals this (within tol)")
    z: float | None = Field(None, description="z coordinate equals this (within tol; 3D meshes)")
    x_min: float | None = None
    x_max: float | None = None
    y_min: float | None = None
    y_max: float | None = None
    z_min: float | None = None
    z_max: float | None = None
    circle: tuple[float, float, float] | None = Field(None, description="on the circle (cx, cy, r), within tol")
    all: bool = Field(False, description="the whole boundary (or every triangle)")
    tol: float | None = Field(None, gt=0, description="absolute tolerance; default 1e-6 * mesh diameter")

    @model_validator(mode="after")
    def _not_empty(self):
        if not self.all and all(getattr(self, k) is None for k in WHERE_KEYS):
            raise ValueError(f"a where table needs at least one of: {', '.join(WHERE_KEYS)}, all = true")
        if self.circle is not None and self.circle[2] <= 0:
            raise ValueError("circle = [cx, cy, r] needs r > 0")
        return self


class MeshSection(StrictModel):
    kind: Literal["rectangle", "cook_membrane", "box", "thick_cylinder", "file"] = Field(
        "rectangle", description="generator (rectangle, cook_membrane: triangles; box: tetrahedra, six per "
        "hexahedral cell; thick_cylinder: a quarter of a hollow cylinder, inner radius r[0], outer r[1], along z, "
        "as a box of nx (radial) x ny (angular) x nz cells mapped to it, tetrahedra) or file (triangles or "
        "tetrahedra, linear or quadratic)")
    nx: int = Field(16, ge=1, le=20000, description="cells along x (rectangle, box) or per side (cook_membrane)")
    ny: int | None = Field(None, ge=1, le=20000, description="cells along y (default nx)")
    nz: int | None = Field(None, ge=1, le=2000, description="box: cells along z (default nx)")
    x: tuple[float, float] = (0.0, 1.0)
    y: tuple[float, float] = (0.0, 1.0)
    z: tuple[float, float] = Field((0.0, 1.0), description="box, thick_cylinder: [min, max] along z")
    r: tuple[float, float] | None = Field(None, description="thick_cylinder: [inner radius, outer radius], "
                                          "0 < inner < outer")
    path: str | None = Field(None, description="mesh file (kind = 'file'), relative to the case file")
    refine: int = Field(0, ge=0, le=8, description="uniform refinements (each splits every triangle in four)")

    @model_validator(mode="after")
    def _consistent(self):
        if self.kind == "file" and not self.path:
            raise ValueError("kind = 'file' needs path = '<mesh file>'")
        if self.kind != "file" and self.path:
            raise ValueError(f"path is only used with kind = 'file' (kind is {self.kind!r})")
        if self.x[1] <= self.x[0] or self.y[1] <= self.y[0] or self.z[1] <= self.z[0]:
            raise ValueError("x, y and z are [min, max] with max > min")
        solid = self.kind in ("box", "thick_cylinder")
        if not solid and (self.nz is not None or tuple(self.z) != (0.0, 1.0)):
            raise ValueError(f"mesh.nz and mesh.z describe a box or thick_cylinder (kind is {self.kind!r}): leave "
                             "them out")
        if (self.kind == "thick_cylinder") != (self.r is not None):
            raise ValueError("mesh.r = [inner, outer] is the radii of kind = 'thick_cylinder' (and only of it): "
                             f"kind is {self.kind!r}, r is {self.r}")
        if self.r is not None and not 0 < self.r[0] < self.r[1] <= MAX_EXTENT:
            raise ValueError(f"mesh.r = {list(self.r)}; allowed: 0 < inner < outer <= {MAX_EXTENT:g}")
        if self.kind == "thick_cylinder" and (tuple(self.x) != (0.0, 1.0) or tuple(self.y) != (0.0, 1.0)):
            raise ValueError("mesh.x and mesh.y are not used by kind = 'thick_cylinder' (its radii are mesh.r): "
                             "leave them out")
        if solid and self.refine:
            raise ValueError(f"mesh.refine = {self.refine}: a box is refined by its cell counts (mesh.nx, ny, nz); "
                             "allowed: 0")
        if self.kind == "rectangle":
            aspect = ((self.x[1] - self.x[0]) / self.nx) / ((self.y[1] - self.y[0]) / (self.ny or self.nx))
            if not 1e-6 <= aspect <= 1e6:
                raise ValueError(f"mesh.x / mesh.nx and mesh.y / mesh.ny give cells {aspect:.3g} times as wide as "
                                 f"tall; allowed: between 1e-6 and 1e6")
        if self.kind == "box":          # thick_cylinder: its cells' shapes follow the radii (r[1] / r[0])
            widths = [(high - low) / cells for (low, high), cells in
                      ((self.x, self.nx), (self.y, self.ny or self.nx), (self.z, self.nz or self.nx))]
            if not 1e-3 <= min(widths) / max(widths):
                raise ValueError(f"mesh: box cells of widths {', '.join(f'{w:.3g}' for w in widths)} (x, y, z); "
                                 "allowed: the widest at most 1000 times the narrowest")
        axes = (("x", self.x, self.nx), ("y", self.y, self.ny or self.nx))
        axes += (("z", self.z, self.nz or self.nx),) if solid else ()
        for name, (low, high), cells in axes:
            extent = high - low
            if not extent <= MAX_EXTENT:
                raise ValueError(f"mesh.{name} = [{low:g}, {high:g}] spans {extent:g}; allowed: at most {MAX_EXTENT:g}")
            if extent / (cells * 4**self.refine) <= 1e-9 * max(abs(low), abs(high)):
                raise ValueError(f"mesh.{name} = [{low:g}, {high:g}]: cells of width {extent / cells:g} are too "
                                 f"narrow to tell apart so far from 0 in float64; allowed: a cell width above 1e-9 "
                                 f"times |mesh.{name}|")
        return self


class Region(StrictModel):
    where: Where
    conductivity: float | None = Field(None, gt=0)
    young: float | None = Field(None, gt=0)


def _check_manufactured(case) -> None:
    """The manufactured solution sin(pi x) sin(pi y) solves -laplace u = 2 pi^2 u on the unit square with u = 0 on
    its boundary (sin_sin_sin: -laplace u = 3 pi^2 u on the unit cube), and nothing else: a case that changes any of
    that would get errors against a solution of another problem. (A mesh file is checked against the unit square
    when it is read: ``problem.build``.)"""
    p, m = case.problem, case.mesh
    cube = p.manufactured == "sin_sin_sin"
    why = (f"problem.manufactured = {p.manufactured!r} is the solution of -laplace u = f on the unit "
           f"{'cube' if cube else 'square'} with u = 0 on its boundary")
    if p.source != 0.0:
        raise ValueError(f"problem.source = {p.source:g}: not used with problem.manufactured, whose source is "
                         f"f = {3 if cube else 2} pi^2 k u (k: problem.conductivity); allowed: leave problem.source out")
    if p.regions:
        raise ValueError(f"problem.regions: {why}, for one conductivity everywhere (its source is scaled by it); "
                         "allowed: no regions")
    if m.kind == "cook_membrane":
        raise ValueError(f"mesh.kind = 'cook_membrane': {why}; allowed: 'rectangle' with x = y = [0, 1], or a mesh "
                         "file of the unit square")
    if m.kind in ("rectangle", "box"):
        for name in ("x", "y", "z") if m.kind == "box" else ("x", "y"):
            if tuple(getattr(m, name)) != (0.0, 1.0):
                raise ValueError(f"mesh.{name} = {list(getattr(m, name))}: {why}; allowed: [0.0, 1.0]")
    if case.boundary.neumann:
        raise ValueError(f"boundary.neumann: {why} (Dirichlet everywhere); allowed: no Neumann conditions")
    for i, bc in enumerate(case.boundary.dirichlet):
        if bc.value != 0.0:
            raise ValueError(f"boundary.dirichlet[{i}].value = {bc.value}: {why}; allowed: 0.0")


def generated_dimension(mesh) -> int | None:
    """The space dimension of a generator mesh (box: 3; rectangle, cook_membrane: 2); None for a file (known once
    it is read)."""
    return 3 if mesh.kind in ("box", "thick_cylinder") else None if mesh.kind == "file" else 2


def check_dimension(case, dim: int | None) -> None:
    """The case's vectors, where tables and choices fit a mesh of ``dim`` space dimensions (None: only what holds in
    both); a ValueError naming the field, the value and what is allowed. Also called by the problem builder once a
    file mesh is read (as a CaseError there)."""
    p = case.problem
    if dim is None:
        return
    if p.manufactured:
        want = "sin_sin" if dim == 2 else "sin_sin_sin"
        if p.manufactured != want:
            raise ValueError(f"problem.manufactured = {p.manufactured!r} on a {dim}D mesh; allowed: {want!r}")
    if p.kind == "elasticity":
        if dim == 3 and p.model not in (None, "solid"):
            raise ValueError(f"problem.model = {p.model!r} on a 3D mesh; allowed: 'solid' (or leave it out)")
        if dim == 2 and p.model == "solid":
            raise ValueError("problem.model = 'solid' on a 2D mesh; allowed: 'plane_strain', 'plane_stress'")
    vectors = [("problem.body_force", p.body_force), ("output.probe", case.output.probe)]
    vectors += [(f"boundary.dirichlet[{i}].displacement", bc.displacement) for i, bc in enumerate(case.boundary.dirichlet)]
    for i, bc in enumerate(case.boundary.neumann):
        vectors += [(f"boundary.neumann[{i}].traction", bc.traction), (f"boundary.neumann[{i}].total_force", bc.total_force)]
    for name, v in vectors:
        if v is not None and len(v) != dim:
            raise ValueError(f"{name} = {list(v)}: {len(v)} components on a {dim}D mesh; allowed: {dim} numbers")
    if dim == 2:
        if case.output.probe_component == "uz":
            raise ValueError("output.probe_component = 'uz' on a 2D mesh; allowed: u, ux, uy, magnitude")
        for i, bc in enumerate(case.boundary.dirichlet):
            if bc.uz is not None:
                raise ValueError(f"boundary.dirichlet[{i}].uz on a 2D mesh; allowed: ux, uy")
        tables = [(f"boundary.dirichlet[{i}].where", bc.where) for i, bc in enumerate(case.boundary.dirichlet)]
        tables += [(f"boundary.neumann[{i}].where", bc.where) for i, bc in enumerate(case.boundary.neumann)]
        tables += [(f"problem.regions[{i}].where", r.where) for i, r in enumerate(p.regions)]
        for name, where in tables:
            used = [k for k in WHERE_3D_KEYS if getattr(where, k) is not None]
            if used:
                raise ValueError(f"{name}.{used[0]} on a 2D mesh; allowed: the keys without z")
    elif any(r.where.circle is not None for r in p.regions) or any(
            bc.where.circle is not None for bc in [*case.boundary.dirichlet, *case.boundary.neumann]):
        raise ValueError("where.circle is a 2D selection (a circle in the x-y plane); on a 3D mesh use tags or "
                         "coordinate bounds")


class ProblemSection(StrictModel):
    kind: Literal["poisson", "elasticity"] = Field("poisson", description="-div(k grad u) = f, or linear elasticity")
    element: Literal["P1", "P2"] = Field("P1", description="Lagrange elements of degree 1 (linear) or 2 (quadratic) "
                                         "on the mesh's triangles or tetrahedra")
    # poisson
    conductivity: float = Field(1.0, gt=0, description="k (default value; regions override it per triangle)")
    source: float = Field(0.0, description="f, constant (poisson)")
    manufactured: Literal["sin_sin", "sin_sin_sin"] | None = Field(
        None, description="sin_sin: u = sin(pi x) sin(pi y), f = 2 pi^2 k u on the unit square; sin_sin_sin: u = "
                          "sin(pi x) sin(pi y) sin(pi z), f = 3 pi^2 k u on the unit cube; u = 0 on the boundary "
                          "(errors are reported)")
    # elasticity
    model: Literal["plane_strain", "plane_stress", "solid"] | None = Field(
        None, description="2D meshes: plane_strain (the default) or plane_stress; tetrahedra: solid (the default)")
    young: float = Field(1.0, gt=0, description="Young's modulus E")
    poisson_ratio: float = Field(0.3, ge=0.0, lt=0.5, description="nu, 0 <= nu < 0.5")
    thickness: float = Field(1.0, gt=0, description="elasticity: out-of-plane thickness t; the stiffness, body_force "
                             "and traction scale with it (a load per unit length of edge is t x traction), "
                             "total_force does not")
    body_force: tuple[float, float] | tuple[float, float, float] | None = Field(
        None, description="elasticity: force per unit volume, 2 components (3 on a 3D mesh); default none")

    def model_in(self, dim: int) -> str:
        """The elasticity model on a mesh of ``dim`` space dimensions (the default: plane_strain, solid)."""
        return self.model or ("solid" if dim == 3 else "plane_strain")

    def body_force_in(self, dim: int) -> tuple:
        """The body force's ``dim`` components (zeros where none is given)."""
        return tuple(self.body_force) if self.body_force is not None else (0.0,) * dim
    regions: list[Region] = Field(default_factory=list, max_length=MAX_ITEMS, description="piecewise-constant coefficients")


class DirichletBC(StrictModel):
    where: Where
    value: float | None = Field(None, description="poisson: u = value")
    displacement: tuple[float, float] | tuple[float, float, float] | None = Field(
        None, description="elasticity: (u_x, u_y), or (u_x, u_y, u_z) on a 3D mesh")
    ux: float | None = Field(None, description="elasticity: fix u_x only")
    uy: float | None = Field(None, description="elasticity: fix u_y only")
    uz: float | None = Field(None, description="elasticity on a 3D mesh: fix u_z only")


class NeumannBC(StrictModel):
    where: Where
    flux: float | None = Field(None, description="poisson: k du/dn per unit length")
    traction: tuple[float, float] | tuple[float, float, float] | None = Field(
        None, description="elasticity: force per unit area of the loaded face (a stress); the load per unit length of "
                          "the edge is problem.thickness x traction (3 components on a 3D mesh)")
    pressure: float | None = Field(
        None, description="elasticity: a pressure p on the loaded face, the traction -p n (n its outward normal); "
                          "P2 or 3D meshes (problem.element = 'P2' or a tetrahedral mesh)")
    total_force: tuple[float, float] | tuple[float, float, float] | None = Field(
        None, description="elasticity: the force on the whole loaded face (through the thickness), spread uniformly "
                          "along its edges: traction = total_force / (edge length x problem.thickness)")


class BoundarySection(StrictModel):
    dirichlet: list[DirichletBC] = Field(default_factory=list, max_length=MAX_ITEMS)
    neumann: list[NeumannBC] = Field(default_factory=list, max_length=MAX_ITEMS)


class MultigridSection(StrictModel):
    """[solve.multigrid]: options of the multigrid preconditioners (their spec's ``options_field``;
    hpcsolve.fem.linalg.precond.mg_options.MGOptions)."""

    hierarchy: Literal[tuple(HIERARCHIES)] = Field(
        "fp32", description="precision of the multigrid hierarchy (fp16: 16-bit storage, float32 arithmetic); "
        "the outer CG still converges on the float64 true residual")
    smoother: Literal["chebyshev", "jacobi"] = Field("chebyshev", description="SpMV-only smoother on every level")
    degree: int | None = Field(None, ge=1, le=10, description="smoothing steps before and after the coarse correction "
                               "(Chebyshev degree; default: 2 for mg, 3 for amg)")
    coarse_size: int = Field(400, ge=1, le=5000, description="levels with at most this many unknowns are solved directly")
    max_levels: int = Field(30, ge=2, le=60)
    amg: Literal["sa", "rs"] = Field("sa", description="algebraic coarsening (pyamg): smoothed aggregation or Ruge-Stueben")
    strength: float | None = Field(None, ge=0, le=1, description="strength threshold of aggregation (symmetric for sa, "
                                   "classical for rs; default: amg's sa 0.08 on its first level, 0.05 below; else 0, "
                                   "which rs reads as 0.25)")
    coarse_strength: float | None = Field(None, ge=0, le=1, description="sa: the threshold below the first "
                                          "aggregation level (default: as strength where strength is given)")
    system_strength: float | None = Field(None, ge=0, le=1, description="sa: the threshold of every level whose "
                                          "near-null space has several vectors (elasticity's rigid-body modes; "
                                          "default: amg's 0.02; as strength where strength is given)")
    flexible: bool = Field(True, description="flexible CG (robust to a slightly non-symmetric low-precision V-cycle)")
    level_format: Literal["auto", "dia", "csr"] = Field(
        "auto", description="storage of the level matrices: dia stores those of structured grids by diagonals (no "
        "column indices to read) and the others as CSR; csr; auto: dia on a GPU, csr on the CPU")

    def options(self) -> dict:
        return self.model_dump(exclude_none=True)


class SolverSection(StrictModel):
    method: str | None = Field(None, description="; ".join(f"{m.name}: {m.summary}" for m in map(
        methods.get, methods.names())) + " (default: cg for fp64/fp32, cg-reliable for mixed)")
    preconditioner: str = Field("auto", description="; ".join(f"{n}: {registry.get(n).summary}" for n in registry.names()))
    multigrid: MultigridSection = Field(default_factory=MultigridSection, description="[solve.multigrid]")
    rtol: float = Field(1e-10, gt=0, lt=1, description="target on the float64 true relative residual, "
                        ">= 1e-16 (below float64 round-off it cannot be reached)")
    maxiter: int | None = Field(None, ge=1, le=MAX_ITERATIONS, description="total Krylov iterations (default 10 x unknowns)")
    check_every: int | None = Field(None, ge=1, le=10000, description="iterations between host convergence checks "
                                     "(default 64 on every backend: the largest block of fused iterations, one CUDA graph "
                                     "on the GPU; blocks shrink near convergence)")
    true_every: int = Field(0, ge=0, le=MAX_ITERATIONS, description="record the true residual every N iterations (0: at decisions)")
    inner_rtol: float | None = Field(None, gt=0, lt=1)
    max_outer: int | None = Field(None, ge=1, le=MAX_ITERATIONS)
    stagnation: float | None = Field(None, gt=0, lt=1)
    reliable_delta: float | None = Field(None, gt=0, lt=1)
    reliable_patience: int | None = Field(None, ge=1, le=MAX_ITERATIONS)
    reference: Literal["auto", "always", "never"] = Field(
        "auto", description="also solve in float64 with spsolve and compare (auto: up to reference_max_dofs)")
    reference_max_dofs: int = Field(300_000, ge=0, le=MAX_ITERATIONS)
    reference_max_seconds: float = Field(30.0, gt=0, description="reference = 'auto' skips the float64 reference "
                                         "(with a note) where its predicted time (SuperLU, ~3.2e-8 n^1.5 s) is above this")

    @field_validator("rtol")
    @classmethod
    def _rtol_reachable(cls, v):
        if v < MIN_RTOL:
            raise ValueError(f"allowed: >= {MIN_RTOL:g} (float64 round-off: a smaller target cannot be reached)")
        return v

    @field_validator("method")
    @classmethod
    def _method_known(cls, v):
        if v is not None and v.lower() not in methods.names():
            raise ValueError(f"allowed: {', '.join(methods.names())}")
        return v.lower() if v else v

    @field_validator("preconditioner")
    @classmethod
    def _preconditioner_known(cls, v):
        # the registered names (hpcsolve.fem.linalg.precond.registry), as the registry spells them (aliases resolved)
        try:
            return registry.get(v).name
        except CaseError:          # pydantic wants a ValueError (the case loader names the field)
            raise ValueError(f"allowed: {registry.allowed_text()}") from None

    def options(self) -> dict:
        keys = ("inner_rtol", "max_outer", "stagnation", "reliable_delta", "reliable_patience")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


class OutputSection(StrictModel):
    plots: bool = True
    probe: tuple[float, float] | tuple[float, float, float] | None = Field(
        None, description="report the solution at the node nearest this point ((x, y), or (x, y, z) on a 3D mesh)")
    probe_component: Literal["u", "ux", "uy", "uz", "magnitude"] = Field(
        "u", description="which value probe_value is: u (poisson; uy for elasticity), ux, uy, uz (3D), magnitude")
    probe_reference: float | None = Field(None, description="published value at the probe (its relative error is "
                                          "reported): not 0")
    field_label: str | None = Field(None, min_length=1, max_length=80,
                                    description="what the solution is, for plot labels (e.g. 'temperature (K)'); "
                                    "default: u")
    probe_tolerance: float | None = Field(
        None, gt=0, le=10, description="the largest probe_rel_error the run's verdict accepts (the summary's "
        "`validation`); default 0.05; needs probe_reference")
    l2_error_constant: float | None = Field(
        None, gt=0, le=1e6, description="problem.manufactured: the verdict accepts error_l2 <= this * h_max^2 "
        "(P1 converges at order 2; P2: h_max^3); default 1.0 (measured 0.69 on the unit square's meshes; P2 0.14, "
        "3D P1 0.8, 3D P2 0.1: hpcsolve.fem.verdicts)")
    h1_error_constant: float | None = Field(
        None, gt=0, le=1e6, description="problem.manufactured: the verdict accepts error_h1_seminorm <= this * h_max "
        "(order 1; P2: h_max^2); default 3.5 (measured 2.47; P2 1.5, 3D P1 3.2, 3D P2 1.4)")
    negligible_fraction: float | None = Field(
        None, gt=0, le=1, description="the precision's error (against the float64 reference) counts as negligible "
        "when it is at most this fraction of the discretisation error (hpcsolve.fem.judge); default 0.1")

    @field_validator("probe_reference")
    @classmethod
    def _reference_not_zero(cls, v):
        if v == 0.0:      # probe_rel_error = |value - reference| / |reference|
            raise ValueError("allowed: a non-zero number (the probe's relative error |value - reference| / "
                             "|reference| needs a reference other than 0), or leave output.probe_reference out")
        return v

    @model_validator(mode="after")
    def _tolerance_has_a_reference(self):
        if self.probe_tolerance is not None and self.probe_reference is None:
            raise ValueError("output.probe_tolerance bounds the probe's error against output.probe_reference, which "
                             "is not given: add probe_reference (and probe), or leave probe_tolerance out")
        return self

    def check_bounds(self, problem) -> None:
        """The manufactured-solution bounds need a manufactured solution (a ValueError naming the field)."""
        for name in ("l2_error_constant", "h1_error_constant"):
            if getattr(self, name) is not None and not problem.manufactured:
                raise ValueError(f"output.{name} scales the verdict's bound on the error against problem.manufactured, "
                                 f"which is not set: leave output.{name} out, or set problem.manufactured")


class FEMCase(CaseBase):
    solver: Literal["fem"]
    mesh: MeshSection = Field(default_factory=MeshSection)
    problem: ProblemSection = Field(default_factory=ProblemSection)
    boundary: BoundarySection = Field(default_factory=BoundarySection)
    solve: SolverSection = Field(default_factory=SolverSection, description="[solve]: linear solver settings")
    output: OutputSection = Field(default_factory=OutputSection)

    @model_validator(mode="after")
    def _boundary_fits_problem(self):
        p = self.problem
        if not self.boundary.dirichlet:
            raise ValueError("boundary.dirichlet: at least one Dirichlet condition is needed; without one the "
                             "stiffness matrix is singular (pure Neumann problem)")
        for i, bc in enumerate(self.boundary.dirichlet):
            vec = (bc.displacement, bc.ux, bc.uy, bc.uz)
            if p.kind == "poisson":
                if bc.value is None or any(v is not None for v in vec):
                    raise ValueError(f"boundary.dirichlet[{i}]: a poisson problem takes value = <number> "
                                     "(not displacement/ux/uy)")
            else:
                if bc.value is not None or all(v is None for v in vec):
                    raise ValueError(f"boundary.dirichlet[{i}]: an elasticity problem takes displacement = [ux, uy], "
                                     "or ux = / uy = (not value)")
                if bc.displacement is not None and any(v is not None for v in vec[1:]):
                    raise ValueError(f"boundary.dirichlet[{i}]: give displacement or ux/uy/uz, not both")
        for i, bc in enumerate(self.boundary.neumann):
            given = [k for k in ("flux", "traction", "total_force", "pressure") if getattr(bc, k) is not None]
            allowed = ("flux",) if p.kind == "poisson" else ("traction", "total_force", "pressure")
            if len(given) != 1 or given[0] not in allowed:
                raise ValueError(f"boundary.neumann[{i}]: a {p.kind} problem takes exactly one of "
                                 f"{' / '.join(allowed)} (got {', '.join(given) or 'none'})")
        for i, r in enumerate(p.regions):
            want = "conductivity" if p.kind == "poisson" else "young"
            other = "young" if want == "conductivity" else "conductivity"
            if getattr(r, want) is None or getattr(r, other) is not None:
                raise ValueError(f"problem.regions[{i}]: a {p.kind} region sets {want} = <number>")
        if p.manufactured and p.kind != "poisson":
            raise ValueError("problem.manufactured applies to kind = 'poisson' only")
        check_dimension(self, generated_dimension(self.mesh))
        if p.manufactured:
            _check_manufactured(self)
        self.output.check_bounds(p)
        return self
