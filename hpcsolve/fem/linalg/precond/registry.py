"""The preconditioners a name can choose (``hpcsolve.fem.solve(preconditioner="amg")``, a case's
``solve.preconditioner``), each one object (:class:`PreconditionerSpec`) stating once what its name means: whether it
runs on a matrix distributed over MPI ranks, whether it needs the structured grid behind the matrix, whether it is a
V-cycle with a set-up, its case options, its memory and run-time figures, and how to build it. ``"auto"`` is one too:
its rule (:func:`choose_auto`) picks one of the others from the run's situation.

Code asks the object (``spec.distributed``, ``spec.needs_grid``, ``spec.cycle``), never compares a preconditioner's
name; this module is where the names stand. A new preconditioner is its own class and one :func:`register` call::

    register(PreconditionerSpec("sor", "symmetric SOR", build=lambda inputs: Sor()))
    solve(A, b, preconditioner="sor")         # and solve.preconditioner = "sor" in a case

The object keeps its name from the case to the V-cycle: :func:`get` gives the spec, ``spec.build(inputs)`` the
:class:`~hpcsolve.fem.linalg.precond.base.Preconditioner` (which carries ``spec``), :func:`spec_of` the spec of any
preconditioner object.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.linalg.precond.base import Jacobi, Preconditioner

#: "auto" picks multigrid from this many unknowns on: below it the V-cycle's set-up and launch latency
#: cost more than the Krylov iterations it saves (H200, docs/design/fem_multigrid.md: shipped cases of 2-4k
#: unknowns 3-10 ms with jacobi against 20-25 ms with mg/amg; Poisson 255^2 10.8 ms plain CG against
#: 32 ms for mg's set-up and solve; 1023^2 163 ms against 14 ms + set-up)
AUTO_MULTIGRID_UNKNOWNS = 200_000

#: what "auto" weighs on a user's matrix (``hpcsolve.fem.solve``; :mod:`hpcsolve.fem.linalg.precond.auto`): the
#: preconditioner whose CG probes the matrix (no set-up, fused into the CG kernels) and the V-cycle it may switch to
#: (any SPD matrix: no grid is known)
AUTO_PROBE = "jacobi"
AUTO_CYCLE = "amg"

#: multigrid on the device, per unknown: levels (operator complexity ~1.35 of the matrix in float32,
#: int32 indices; the finest level stored by diagonals is a copy of its own: 7 (scalar) to ~20 (elasticity)
#: diagonals), P and R, five vectors per level, and the float64 SpGEMM products of the set-up (the geometric set-up's
#: probe blocks, two n x 9 float64 arrays at the finest level, 144 B, are made before the levels are uploaded: with
#: the matrix, P, R and the Krylov vectors about 370 B at that moment, counted, not measured)
#: 3D elasticity (3 unknowns per node, about 45 entries per row against 2D's 14): 2D's figure scaled by the entries
#: per row, not measured
MG_DEVICE_BYTES_PER_UNKNOWN = {1: 460, 2: 1000, 3: 3200}
AMG_HOST_BYTES_PER_UNKNOWN = 600    # pyamg's smoothed-aggregation hierarchy (float64, int32) and its temporaries
#: the dense coarsest level on the device: float64 values at most and int32 column indices per entry
COARSE_DENSE_DEVICE_BYTES = 8 + 4


@dataclass(frozen=True)
class Inputs:
    """What a preconditioner is built from: ``options`` of its case section (``spec.options_field``: mg/amg take
    [solve.multigrid], the ``multigrid=`` of ``solve``), the structured ``grid`` of the unknowns (where
    ``spec.needs_grid``), the ``near_nullspace`` (rigid-body modes; where ``spec.near_nullspace``), and ``field``:
    the options' name in errors."""

    options: dict | None = None
    grid: object = None
    near_nullspace: object = None
    field: str = "multigrid"


@dataclass(frozen=True)
class Footprint:
    """Memory of a preconditioner beyond the solve's, for the run's estimate (``hpcsolve.fem.memory``): bytes on the
    host, rows of a dense coarsest level (inverted on the host, stored on the device) and bytes on the device."""

    host_bytes: int = 0
    coarse_rows: int = 0
    device_bytes: int = 0


@dataclass(frozen=True)
class Cost:
    """Run-time figures of a preconditioner for the estimate (``hpcsolve.fem.estimate``; docs/measured). Iterations
    grow as (unknowns ratio)^``size_exponent`` (by unknowns per node: 1 scalar, 2 elasticity); without a calibration
    ``fixed_iterations`` or ``iterations_per_sqrt_n`` x sqrt(unknowns); ``vectors``: vectors a CG iteration moves with
    it; ``setup_s``: set-up seconds (fixed, per unknown) by backend kind ("cpu", "gpu")."""

    size_exponent: dict = field(default_factory=lambda: {1: 0.5, 2: 0.5})
    iterations_per_sqrt_n: float = 5.0
    fixed_iterations: int | None = None
    vectors: int = 8
    setup_s: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Situation:
    """What "auto" decides from: the solve ``method`` (a :class:`hpcsolve.fem.linalg.methods.Method`), whether the case
    ``named`` it, the MPI ``ranks``, and (asked only when needed: they may read a mesh file) the ``unknowns`` and
    whether the mesh is ``structured`` (numbered on a grid)."""

    method: object
    named: bool
    ranks: int
    unknowns: Callable[[], int]
    structured: Callable[[], bool]


def _no_memory(unknowns: int, ncomp: int, options: dict) -> Footprint:
    return Footprint()


@dataclass(frozen=True)
class PreconditionerSpec:
    """One preconditioner name. ``build(inputs)`` makes the object (None: "auto", which ``choose``-s another);
    ``distributed``: it runs on a matrix distributed over MPI ranks; ``needs_grid``: it needs the structured grid
    behind the matrix (``fallback``: the name it amounts to where the grid cannot be halved); ``near_nullspace``: it
    takes the rigid-body modes of elasticity; ``cycle``: a V-cycle (a set-up before the solve, levels per iteration);
    ``options_field``: its case options' section ([solve.multigrid]); ``aliases``: other names a case may give;
    ``memory(unknowns, ncomp, options)`` -> :class:`Footprint`; ``cost``: :class:`Cost`."""

    name: str
    summary: str
    build: Callable[[Inputs], Preconditioner] | None = None
    distributed: bool = False
    needs_grid: bool = False
    fallback: str | None = None
    near_nullspace: bool = False
    cycle: bool = False
    options_field: str | None = None
    aliases: tuple[str, ...] = ()
    memory: Callable[[int, int, dict], Footprint] = _no_memory
    cost: Cost = field(default_factory=Cost)
    choose: Callable[[Situation], "PreconditionerSpec"] | None = None

    def make(self, inputs: Inputs | None = None) -> Preconditioner:
        """The preconditioner object, carrying this spec (``pc.spec``)."""
        inputs = inputs or Inputs()
        if inputs.options and not self.options_field:
            takes = [s.name for s in _REGISTRY.values() if s.options_field]
            raise CaseError.invalid(inputs.field, inputs.options, f"nothing with preconditioner {self.name!r}",
                                    why=f"{inputs.field} options apply to preconditioner {' or '.join(map(repr, takes))}")
        pc = self.build(inputs)
        pc.spec = self
        return pc

    def __str__(self) -> str:
        return self.name


_REGISTRY: dict[str, PreconditionerSpec] = {}
_ALIASES: dict[str, str] = {}


def register(spec: PreconditionerSpec) -> PreconditionerSpec:
    """Add ``spec`` (a new name and aliases); returns it."""
    for name in (spec.name, *spec.aliases):
        if name in _REGISTRY or name in _ALIASES:
            raise ValueError(f"preconditioner name {name!r} is registered already")
    _REGISTRY[spec.name] = spec
    _ALIASES.update({a: spec.name for a in spec.aliases})
    return spec


def unregister(name: str) -> None:
    spec = _REGISTRY.pop(name, None)
    for a in spec.aliases if spec is not None else ():
        _ALIASES.pop(a, None)


def names(include_auto: bool = True) -> tuple[str, ...]:
    """The registered names, "auto" first (the names a case's solve.preconditioner takes, aliases aside)."""
    return tuple(n for n, s in _REGISTRY.items() if include_auto or s.build is not None)


def allowed_text() -> str:
    return ", ".join(names())


def get(name, field: str = "preconditioner") -> PreconditionerSpec:
    """The spec of a name (any case, or an alias) or a spec; a CaseError naming ``field`` lists the names."""
    if isinstance(name, PreconditionerSpec):
        return name
    key = name.lower() if isinstance(name, str) else None
    key = _ALIASES.get(key, key)
    if key not in _REGISTRY:
        raise CaseError.invalid(field, name, allowed_text())
    return _REGISTRY[key]


def spec_of(pc: Preconditioner) -> PreconditionerSpec:
    """The spec of a preconditioner object: the one it was built from, else the registered one of its name, else one
    made for it (a user's Preconditioner subclass, a SciPy operator: not distributed)."""
    spec = getattr(pc, "spec", None)
    if isinstance(spec, PreconditionerSpec):
        return spec
    name = getattr(pc, "name", "")
    known = _REGISTRY.get(name)
    if known is not None and known.build is not None:
        return known
    return PreconditionerSpec(name, type(pc).__name__, build=lambda inputs: pc, distributed=bool(pc.identity))


def check_distributed(spec: PreconditionerSpec, field: str = "preconditioner") -> None:
    """A CaseError naming ``field`` where ``spec`` cannot run on a matrix distributed over MPI ranks."""
    if spec.distributed:
        return
    ok = [s.name for s in _REGISTRY.values() if s.distributed]
    raise CaseError.invalid(field, spec.name, f"{' or '.join(ok)} on several MPI ranks (auto picks "
                            f"{choose_auto_distributed().name} there)",
                            why=f"the {'multigrid hierarchy' if spec.cycle else spec.name} is not distributed yet "
                                "over MPI ranks")


def resolve(spec: PreconditionerSpec, situation: Situation) -> PreconditionerSpec:
    """``spec`` with "auto" resolved (its rule ``choose``) for the ``situation``."""
    return spec.choose(situation) if spec.choose is not None else spec


def choose_auto_distributed() -> PreconditionerSpec:
    return _REGISTRY["jacobi"]


def choose_fixed(s: Situation) -> PreconditionerSpec | None:
    """What "auto" amounts to whatever the matrix: the preconditioner the method always runs with (pcg-jacobi: jacobi;
    spsolve: none) or the one it means when named (cg: none); on several MPI ranks jacobi (the hierarchy is not
    distributed). None: the choice is the matrix's (:func:`choose_auto` for a case, the probe of
    :mod:`hpcsolve.fem.linalg.precond.auto` for ``solve`` on a user's matrix)."""
    fixed = s.method.preconditioner or (s.method.named_preconditioner if s.named else None)
    if fixed is not None:
        return get(fixed)
    if s.ranks > 1:
        return choose_auto_distributed()
    return None


def choose_auto(s: Situation) -> PreconditionerSpec:
    """The rule of "auto" for a case: :func:`choose_fixed`, else below AUTO_MULTIGRID_UNKNOWNS unknowns jacobi; above it
    mg on a structured mesh, amg otherwise."""
    fixed = choose_fixed(s)
    if fixed is not None:
        return fixed
    if s.unknowns() < AUTO_MULTIGRID_UNKNOWNS:
        return _REGISTRY["jacobi"]
    return _REGISTRY["mg"] if s.structured() else _REGISTRY["amg"]


class _Multigrid:
    """``build`` of a multigrid kind: the Multigrid V-cycle, its module imported on the first build (the multigrid
    modules may ask this registry, so it holds their class as "module:attribute", as ``hpcsolve.core`` holds a
    family's)."""

    TARGET = "hpcsolve.fem.linalg.precond.multigrid:Multigrid"

    def __init__(self, kind: str):
        self.kind = kind

    def __call__(self, inputs: Inputs) -> Preconditioner:
        module, _, attr = self.TARGET.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        return cls(self.kind, inputs.options, grid=inputs.grid, near_nullspace=inputs.near_nullspace,
                   field=inputs.field)


def _multigrid_memory(host_per_unknown: int):
    def memory(unknowns: int, ncomp: int, options: dict) -> Footprint:
        rows = min(int(options.get("coarse_size", 400)), unknowns)
        return Footprint(host_bytes=unknowns * host_per_unknown, coarse_rows=rows,
                         device_bytes=int(unknowns * MG_DEVICE_BYTES_PER_UNKNOWN[ncomp]
                                          + rows**2 * COARSE_DENSE_DEVICE_BYTES))
    return memory


# the figures of the built-in preconditioners: iterations ~ (size ratio)^p (fitted: Poisson mg 9-10 iterations from
# 64^2 to 4095^2, amg 15-20; Cook fp64 mg 42 -> 97, amg 50 -> 117 from 2,178 to 522,242 unknowns, H100 and NumPy);
# without a calibration fp64 iterations per sqrt(unknowns) for rtol 1e-10 (the shipped cases: 0.8-10 with none) or a
# fixed count for multigrid; set-up (H100, CuPy: mg and amg 45-80 ms from 8k to 663k unknowns, the aggregation on the
# device; amg on NumPy: pyamg's aggregation and the coarse inverse on the host, docs/design/fem_solvers.md, "auto")
register(PreconditionerSpec("auto", "jacobi below 200,000 unknowns; above, mg on structured generator meshes and amg "
                            "otherwise (none with method = cg or spsolve)", choose=choose_auto))
register(PreconditionerSpec("none", "no preconditioner (plain CG)", build=lambda inputs: Preconditioner(),
                            distributed=True, cost=Cost(iterations_per_sqrt_n=5.0, vectors=8)))
register(PreconditionerSpec("jacobi", "diagonal scaling, fused into the CG kernels", build=lambda inputs: Jacobi(),
                            distributed=True, cost=Cost(iterations_per_sqrt_n=4.0, vectors=10)))
register(PreconditionerSpec(
    "mg", "geometric multigrid V-cycle (P1 on the generators' grids, 2D and 3D; P2 on any mesh through a p-multigrid "
          "level to P1)", build=_Multigrid("mg"), needs_grid=True, fallback="amg", near_nullspace=True,
    cycle=True, options_field="multigrid", memory=_multigrid_memory(0),
    cost=Cost(size_exponent={1: 0.05, 2: 0.12}, fixed_iterations=30,
              setup_s={"cpu": (3e-3, 0.5e-6), "gpu": (45e-3, 0.03e-6)})))
register(PreconditionerSpec(
    "amg", "algebraic multigrid (pyamg hierarchy)", build=_Multigrid("amg"), near_nullspace=True, cycle=True,
    options_field="multigrid", memory=_multigrid_memory(AMG_HOST_BYTES_PER_UNKNOWN),
    # cpu: pyamg's set-up, the one amg runs on NumPy (amg_setup "auto"), fitted to the AMG family's small and medium
    # members (docs/measured/amg_family_auto_cpu_2026-12-07.md); the device set-up takes about twice as long there.
    # The fixed 25 ms keeps matrices below about 950 unknowns "tiny" for auto (n Jacobi-PCG iterations cost less)
    cost=Cost(size_exponent={1: 0.1, 2: 0.2}, fixed_iterations=40,
              setup_s={"cpu": (0.025, 1.5e-6), "gpu": (45e-3, 0.03e-6)})))
