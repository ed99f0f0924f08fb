"""Run-time and iteration estimate of an FEM run (``FEMFamily.estimate_runtime``; ``hpcsolve run --dry-run``, the
``compare`` plan and its ``--budget``), from a model: nothing is timed when the estimate is made, so two calls give
the same answer.

Iterations. A calibration solve of the same case on a coarse copy of its mesh (mesh.nx halved, or one refinement
fewer, until at most CALIBRATION_UNKNOWNS unknowns; the case itself where it is that small), on NumPy, with the run's
precision, method and preconditioner and no reference: its iteration counts are deterministic (a few ms). Scaled
to the run's mesh as CG's iteration count scales with the mesh size h (2D: h ~ unknowns^-1/2):

* none / jacobi: iterations ~ sqrt(kappa) ~ 1/h ~ unknowns^0.5 (SIZE_EXPONENT);
* mg / amg: nearly independent of the size (SIZE_EXPONENT 0.05 / 0.1 for one unknown per node, 0.12 / 0.2 for
  elasticity; fitted: Poisson mg 9-10 iterations from 64^2 to 4095^2, amg 15-20; Cook mg 42-97, amg 50-117 from
  2k to 522k unknowns);
* what ends the run is modelled, not extrapolated: CG runs until its recursive residual meets rtol (the iterations
  scaled above) and then checks the float64 true residual. Where rtol is attainable that check converges. In
  float32 (and float64 at an rtol below kappa x 1.1e-16) the true residual stalls near kappa x unit roundoff, kappa
  the calibration's Lanczos estimate scaled as iterations^2 (:func:`stalls`): the run stops after ``stall_checks``
  more checks without a 10% improvement (``hpcsolve.fem.linalg.cg_run.run_cg``), one block each (8 iterations with
  a plain or Jacobi preconditioner, 1 with a V-cycle): the stop, not maxiter, is predicted. Mixed (cg-reliable):
  float32 iterations with float64 residual replacements, the total scaled as above (MIXED_CYCLE_EXTRA more with a
  V-cycle), without one the float64 run's predicted iterations x the ratio mixed/float64 of the calibration mesh
  (MIXED_RATIO); ir-restarted: outer refinement steps x inner iterations, scaled as one;
* checks come at block ends (``check_every``, capped by ``true_every``): a count below two blocks is rounded up to
  a block.

Time. assembly (per triangle) + preconditioner set-up (per unknown) + iterations x the cost of one (bytes moved per
iteration / the backend's effective bandwidth + a fixed latency; a V-cycle MG_CYCLE_PLAIN_ITERATIONS plain
iterations' bytes plus a latency per level) + error norms (manufactured cases; on a GPU the fields' copies, per
node) + the float64 reference
(``memory.reference_plan``'s prediction; beside the errors on a GPU). The constants per backend kind are fitted to
measured runs (docs/measured/, scripts/fem_estimate_check.py prints how they hold). The estimate is of a warm run:
a process's first call of a GPU backend also compiles kernels (cached on disk afterwards)."""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.core import backends, parallel
from hpcsolve.core.errors import CaseError
from hpcsolve.core.precision import REFERENCE, Precision
from hpcsolve.fem import memory as fem_memory
from hpcsolve.fem.choices import components, dimension, fem_mesh_size, method_of
from hpcsolve.fem.discrete import problem as prob
from hpcsolve.fem.linalg import methods
from hpcsolve.fem.linalg.cg_options import CGOptions
from hpcsolve.fem.linalg.precond import registry
from hpcsolve.fem.linalg.cg_run import FIRST_SHORT_BLOCK
from hpcsolve.fem.reference import beside, with_reference

#: the calibration solve's mesh: the case's mesh coarsened until it has at most this many unknowns
CALIBRATION_UNKNOWNS = 2500
#: a mesh that cannot be coarsened (a file mesh without mesh.refine) is calibrated on itself up to this size; above
#: it the iterations come from DEFAULT_ITERATIONS_PER_SQRT_N
CALIBRATION_MAX_UNKNOWNS = 50_000
#: iterations ~ (unknowns ratio)^p, p by preconditioner (its spec's ``cost.size_exponent``, for one unknown per node
#: and two: the near-nullspace of elasticity makes multigrid less size-independent); mixed with a V-cycle grows faster
#: (its residual replacements restart the recurrences): MIXED_CYCLE_EXTRA more. Without a calibration: the spec's
#: ``cost.fixed_iterations`` or ``cost.iterations_per_sqrt_n``. The fit: docs/measured/notes_calibrations.md
#: ("FEM iteration growth")
MIXED_CYCLE_EXTRA = 0.05
#: mixed plain CG (float32 recurrences, float64 residual replacements) against the float64 run: a ratio of iterations
#: that holds over the sizes (NumPy, rtol 1e-10: the heat plate 1.25-1.33 from 1k to 200k unknowns, Cook 1.67-1.99
#: from 160 to 33k, Poisson 1.71-1.96 from 66k to 1M), measured on the calibration mesh and kept within these bounds:
#: on the smallest meshes a check block is a large part of the count (Poisson 1k unknowns: 150 against 50)
MIXED_RATIO = (1.0, 2.0)
#: the block of iterations after the recursive residual met rtol: plain CG's shortest block, a V-cycle's one
#: (``cg_run.Run.block_size``)
TAIL_BLOCK = {"plain": 8, "cycle": 1}

#: per backend kind: "cpu" (NumPy; SciPy's sparse product runs at about the same rate on float32 values, so its
#: bytes are counted at 8 per value) and "gpu" (CuPy, Numba-CUDA: fused kernels, CUDA graphs)
#: fitted on the H100 (scripts/fem_estimate_check.py, CuPy: 15-26 us per plain iteration up to 130k unknowns, 53 us
#: at 663k scalar, 120 us at 522k elasticity, 223 us at 2.6M; a V-cycle 230 us at 8k unknowns to 660 us at 663k)
#: and the 2-core development machine (NumPy, one BLAS thread)
BANDWIDTH = {"cpu": 20e9, "gpu": 2e12}              # effective bytes/s of a CG iteration
ITERATION_LATENCY_S = {"cpu": 20e-6, "gpu": 15e-6}  # per iteration: Python calls (CPU), launches and checks (GPU)
LEVEL_LATENCY_S = {"cpu": 60e-6, "gpu": 70e-6}      # per multigrid level of one V-cycle
#: mixed on a GPU, bytes per value by unknowns per node: float32 recurrences, float64 solution updates and
#: replacements; measured (H100) as fp32's per iteration on one unknown per node (Poisson 1M and 4M, the heat plate
#: 2.6M), as fp64's on elasticity (Cook 522k: 105 us against fp32's 50 and fp64's 122)
MIXED_VALUE_BYTES = {1: 4, 2: 8}
MG_CYCLE_PLAIN_ITERATIONS = 4.0                      # a V-cycle's bytes, in plain CG iterations (op. complexity 1.33)
#: set-up seconds: fixed + per triangle (mesh, assembly, boundary conditions; H100: 7 ms at 8k triangles, 64 ms at
#: 1.3M, 365 ms at 5.3M)
ASSEMBLY_S = {"cpu": (2e-3, 0.6e-6), "gpu": (8e-3, 0.06e-6)}
#: the same on a GPU for a rectangle from the generator (structured: assembly and boundary conditions 32 ms at 2.1M
#: triangles, 110 ms at 8.4M on the H100, where the per-triangle figure above put 0.5 s)
ASSEMBLY_S_RECTANGLE = {"cpu": ASSEMBLY_S["cpu"], "gpu": (8e-3, 0.015e-6)}
#: a preconditioner's set-up (fixed + per unknown, by backend kind) and the vectors an iteration moves with it: its
#: spec's ``cost`` (hpcsolve.fem.linalg.precond.registry)
#: after the solve: error norms against a manufactured solution (6-point quadrature, exact fields; CPU, per
#: triangle) and, on a GPU, the norms on the device, the probe, ranges and fields copied back (per node; the fit:
#: docs/measured/notes_calibrations.md ("Error norms and fields after the solve"))
NORMS_S_PER_TRIANGLE = {"cpu": 0.9e-6, "gpu": 0.0}
FIELDS_S_PER_NODE = {"cpu": 0.0, "gpu": 2.0e-8}
RUN_OVERHEAD_S = {"cpu": 2e-3, "gpu": 5e-3}          # the rest of a run (metrics, result)
#: the float64 reference (SuperLU on the host, ``memory.REFERENCE_SECONDS``, fitted on the 2-core development machine)
#: beside a GPU run, on the GPU machine's host: between the hosts seen, Poisson at 65k unknowns took 0.28-0.33 s on
#: one H100 machine and 0.41-0.56 s on another (the model 0.34 s), Cook at 130k 1.23-1.57 s (the model 1.88 s)
REFERENCE_HOST_FACTOR = {"cpu": 1.0, "gpu": 1.2}


def backend_kind(backend) -> str:
    return "gpu" if backends.get(backend).gpu else "cpu"


def estimate_runtime(case, backend, policy: Precision, description, run_case) -> dict:
    """The estimate ``FEMFamily.estimate_runtime`` returns: estimated_iterations, estimated_seconds, the seconds per
    iteration and the basis of each term. ``run_case(case, backend, policy)``: the FEM run (``runner.run``, passed in:
    the runner delegates its estimate here), which solves the calibration copy."""
    info = description.parameters
    pc = registry.get(info.get("preconditioner") or "none")
    method = methods.get(info.get("method") or method_of(case, policy))
    points, triangles = fem_mesh_size(case)
    ncomp = components(case)
    unknowns = int(info.get("unknowns") or points * ncomp)
    triangles = int(info.get("triangles") or triangles)
    if method.direct:
        return _direct(case, backend, unknowns, triangles, ncomp)
    its, its_basis = iterations(case, policy, pc, method, unknowns, run_case)
    kind = backend_kind(backend)
    per_it = seconds_per_iteration(kind, policy, pc, unknowns, ncomp, case.solve.multigrid.coarse_size,
                                   fem_memory.nnz_per_row(case))
    terms = setup_terms(case, kind, pc, unknowns, triangles)
    solve_s = its * per_it
    before = terms["assembly"] + terms["preconditioner set-up"] + solve_s + RUN_OVERHEAD_S[kind]
    post = terms["error norms"]
    make_ref, ref_s, _ = fem_memory.reference_plan(case, unknowns)
    overlap = beside(backends.get(backend), parallel.ranks(parallel.world()))
    ref_s = ref_s * REFERENCE_HOST_FACTOR[kind] if make_ref else 0.0
    seconds = with_reference(before, ref_s, post, overlap)
    post_txt = f"errors and fields {post:.3g} s"
    if ref_s and overlap:
        post_txt = f"the float64 reference (SuperLU) ~{ref_s:.3g} s with the {post_txt} beside it (the longer counts)"
    elif ref_s:
        post_txt = f"float64 reference (SuperLU) ~{ref_s:.3g} s + {post_txt}"
    basis = (f"model ({kind}): assembly {terms['assembly']:.3g} s + {pc} set-up {terms['preconditioner set-up']:.3g} s"
             f" + {its} iterations x {per_it * 1e3:.3g} ms ({its_basis}) + {post_txt}")
    return {"seconds_per_iteration": per_it, "estimated_iterations": its, "estimated_seconds": seconds,
            "estimate_basis": basis}


def _direct(case, backend, unknowns: int, triangles: int, ncomp: int) -> dict:
    """spsolve: SuperLU's n^1.5 (``memory.REFERENCE_SECONDS``), on the host whatever the backend."""
    kind = backend_kind(backend)
    terms = setup_terms(case, kind, None, unknowns, triangles)
    lu = fem_memory.reference_seconds(case, unknowns)
    seconds = terms["assembly"] + lu + terms["error norms"] + RUN_OVERHEAD_S[kind]
    return {"seconds_per_iteration": math.nan, "estimated_iterations": 0, "estimated_seconds": seconds,
            "estimate_basis": f"model ({kind}): assembly {terms['assembly']:.3g} s + SuperLU ~{lu:.3g} s "
                              f"(n^1.5) + errors and fields {terms['error norms']:.3g} s"}


def setup_terms(case, kind: str, pc, unknowns: int, triangles: int) -> dict:
    """Seconds of the work around the iterations: assembly, the preconditioner's set-up (``pc``: a spec or a name;
    None: no preconditioner), the error norms."""
    fixed, per_tri = (ASSEMBLY_S_RECTANGLE if case.mesh.kind == "rectangle" else ASSEMBLY_S)[kind]
    pc_fixed, pc_per = registry.get(pc).cost.setup_s.get(kind, (0.0, 0.0)) if pc is not None else (0.0, 0.0)
    manufactured = case.problem.kind == "poisson" and bool(getattr(case.problem, "manufactured", None))
    ncomp = components(case)
    norms = (NORMS_S_PER_TRIANGLE[kind] * triangles if manufactured else 0.0) + FIELDS_S_PER_NODE[kind] * unknowns / ncomp
    return {"assembly": fixed + per_tri * triangles, "preconditioner set-up": pc_fixed + pc_per * unknowns,
            "error norms": norms}


def seconds_per_iteration(kind: str, policy: Precision, pc, unknowns: int, ncomp: int,
                          coarse_size: int = 400, nnz_per_row: float | None = None) -> float:
    """One Krylov iteration: the bytes it moves (the matrix in CSR: values and int32 columns; its vectors: the spec's
    ``cost.vectors``) over the backend's effective bandwidth, plus a latency; with a V-cycle (``spec.cycle``: mg, amg)
    also MG_CYCLE_PLAIN_ITERATIONS plain iterations' bytes, a latency per level: about log4(unknowns / coarse_size) + 1
    levels. ``pc``: a spec or a name."""
    pc = registry.get(pc)
    value = 8 if kind == "cpu" else (MIXED_VALUE_BYTES[min(ncomp, 2)] if policy.refinement else policy.storage_bytes)
    nnz = unknowns * (nnz_per_row or (7 if ncomp == 1 else 14))
    plain = nnz * (value + 4) + (unknowns + 1) * 4
    t = ITERATION_LATENCY_S[kind] + (plain + pc.cost.vectors * unknowns * value) / BANDWIDTH[kind]
    if pc.cycle:
        levels = 1 + max(0.0, math.log(max(unknowns, 1) / max(coarse_size, 1), 4))
        t += MG_CYCLE_PLAIN_ITERATIONS * plain / BANDWIDTH[kind] + LEVEL_LATENCY_S[kind] * levels
    return t


def iterations(case, policy: Precision, pc, method, unknowns: int, run_case) -> tuple[int, str]:
    """(predicted iterations of the run, how): the calibration solve's, scaled to ``unknowns`` (module docstring).
    ``pc``, ``method``: specs or names."""
    pc, method = registry.get(pc), methods.get(method)
    s = case.solve
    maxiter = s.maxiter or max(10 * unknowns, 100)
    cal = calibration(case, policy, pc, run_case)
    ncomp = components(case)
    # the exponents are 2D's (iterations ~ 1/h = unknowns^(1/2)); on tetrahedra 1/h = unknowns^(1/3)
    p = pc.cost.size_exponent[min(ncomp, 2)] * (2 / dimension(case)) + (
        MIXED_CYCLE_EXTRA if policy.refinement and pc.cycle else 0.0)
    if cal is None:
        raw = (pc.cost.fixed_iterations if pc.cost.fixed_iterations is not None
               else pc.cost.iterations_per_sqrt_n * math.sqrt(unknowns) * math.log(2 / s.rtol) / math.log(2e10))
        its = _stop(case, policy, pc, method, raw, stalls(policy, method, math.nan, s.rtol))
        return min(its, maxiter), f"no calibration (a mesh that cannot be coarsened): {raw:.0f} to rtol"
    g = (unknowns / cal["unknowns"]) ** p
    if method.restarted:
        its = int(math.ceil(cal["iterations"] * g))
        how = f"{cal['outer']} refinement steps, their inner iterations x {g:.3g}"
    elif policy.refinement and not pc.cycle:
        # plain CG with float64 replacements: MIXED_RATIO x the float64 run's iterations (predicted as that run's)
        ref = calibration(case, REFERENCE, pc, run_case)
        ratio = mixed_ratio(cal, ref)
        its64 = _stop(case, REFERENCE, pc, methods.get(method_of(case, REFERENCE)), ref["to_rtol"] * g,
                      stalls(REFERENCE, method_of(case, REFERENCE), ref["kappa"] * g * g, s.rtol))
        its = _stop(case, policy, pc, method, its64 * ratio, False)
        how = (f"the float64 run's {its64} ({ref['to_rtol']} to rtol x {g:.3g}) x {ratio:.3g} (float32 recurrences "
               f"with float64 replacements: {cal['iterations']} against float64's {ref['iterations']} there)")
    elif policy.refinement:
        its = _stop(case, policy, pc, method, cal["to_rtol"] * g, False)
        how = f"{cal['to_rtol']} x {g:.3g}, with float64 replacements"
    else:
        # iterations ~ sqrt(kappa); a V-cycle's kappa is not the matrix's, whose kappa x unit roundoff bounds the
        # true residual: unknown there (a float32 V-cycle run stalls at any rtol below ~1e-3)
        kappa = cal["kappa"] * g * g if not pc.cycle else math.nan
        stop = stalls(policy, method, kappa, s.rtol)
        its = _stop(case, policy, pc, method, cal["to_rtol"] * g, stop)
        how = f"{cal['to_rtol']} to rtol x {g:.3g}" + (
            (f", then the stall checks (attainable ~ kappa x unit roundoff = {kappa * _unit(policy):.1e} > rtol)"
             if math.isfinite(kappa) else ", then the stall checks (float32: attainable ~ kappa x unit roundoff)")
            if stop else "")
    if not cal["stopped"]:
        its, how = maxiter, f"the calibration reached maxiter ({cal['reason']})"
    return min(its, maxiter), (f"calibrated on {cal['unknowns']:,} unknowns ({cal['mesh']}): {how}; "
                               f"(size ratio)^{p:g}")


def mixed_ratio(cal: dict, ref: dict | None) -> float:
    """Mixed plain CG's iterations over float64's on the calibration mesh, within MIXED_RATIO (module docstring)."""
    lo, hi = MIXED_RATIO
    if ref is None or not ref.get("iterations"):
        return hi
    return min(max(cal["iterations"] / ref["iterations"], lo), hi)


def stalls(policy: Precision, method, kappa: float, rtol: float) -> bool:
    """Whether CG in one precision (``method.plain``; a Method or a name) stalls above ``rtol``: its true residual
    bottoms out near kappa x unit roundoff (of the working precision); an unknown kappa (nan) counts as stalling in a
    precision below float64. Mixed precision replaces its residuals in float64 and does not stall so."""
    if policy.refinement or not methods.get(method).plain:
        return False
    unit = _unit(policy)
    if not math.isfinite(kappa):
        return unit > 1e-10
    return kappa * unit > rtol


def _unit(policy: Precision) -> float:
    return float(np.finfo(policy.compute).eps) / 2


def _stop(case, policy: Precision, pc, method, raw: float, stall: bool) -> int:
    """The iteration at which the run stops when its recursive residual meets rtol after ``raw`` iterations: at the
    end of the block holding it, plus the stall checks (``stall``) where the true residual cannot reach rtol."""
    s = case.solve
    K = s.check_every or 64
    B = min(K, s.true_every) if s.true_every else K
    cycle = registry.get(pc).cycle

    def block_end(n: int) -> int:
        # plain CG: blocks of B until two blocks of history (the iterate count + the initial residual), then blocks
        # sized to land on rtol; a V-cycle's blocks are short and sized the same way
        if cycle:
            return max(n, FIRST_SHORT_BLOCK)
        return n if n + 1 >= 2 * K else math.ceil(n / B) * B

    n = block_end(max(1, math.ceil(raw)))
    for _ in range(_stall_checks(s) if stall else 0):
        short = TAIL_BLOCK["cycle" if cycle else "plain"]
        n += short if cycle or n + 1 >= 2 * K else B
    return int(n)


def _stall_checks(s) -> int:
    """The run's stall_checks (a solve option without a case field: its default)."""
    return getattr(s, "stall_checks", None) or CGOptions().stall_checks


def calibration_case(case, pc, max_unknowns: int = CALIBRATION_UNKNOWNS):
    """The coarse copy of ``case`` (preconditioner fixed to ``pc``, no reference, no plots) that the iterations are
    calibrated on, and its mesh in words; None where the mesh cannot be coarsened and is above
    CALIBRATION_MAX_UNKNOWNS."""
    m = case.mesh
    ncomp = components(case)
    over = [f"solve.preconditioner='{registry.get(pc).name}'", "solve.reference='never'", "output.plots=false"]
    nx, ny, nz, refine = getattr(m, "nx", None), getattr(m, "ny", None), getattr(m, "nz", None), m.refine

    def size(nx_, ny_, nz_, refine_):
        probe = case.with_overrides(*_mesh_overrides(m, nx_, ny_, nz_, refine_))
        return fem_mesh_size(probe)[0] * ncomp

    n = size(nx, ny, nz, refine)
    shrink = 2 ** dimension(case)
    while n > max_unknowns:
        if refine > 0:
            refine -= 1
        elif m.kind != "file" and nx // 2 >= 4 and n / shrink >= max_unknowns / 4:
            # a halving divides 2D meshes by 4 (always above a quarter of the target here), tetrahedra by 8: a 3D
            # mesh stops above the target rather than fall far below it (16^3 P1 with amg took 11 iterations at
            # 32^3 and 2 at 8^3, where its coarse level is most of the mesh)
            nx, ny, nz = nx // 2, (max(ny // 2, 1) if ny else ny), (max(nz // 2, 1) if nz else nz)
        else:
            break
        n = size(nx, ny, nz, refine)
    if n > CALIBRATION_MAX_UNKNOWNS:
        return None, ""
    mesh_over = _mesh_overrides(m, nx, ny, nz, refine)
    return case.with_overrides(*mesh_over, *over), ", ".join(mesh_over) or "the case's own mesh"


def _mesh_overrides(m, nx, ny, nz, refine) -> list[str]:
    out = [] if m.kind == "file" else [f"mesh.nx={nx}"] + ([f"mesh.ny={ny}"] if ny else []) + (
        [f"mesh.nz={nz}"] if nz else [])
    return out + [f"mesh.refine={refine}"]


def calibration(case, policy: Precision, pc, run_case) -> dict | None:
    """The calibration solve's counts (cached per case, precision and preconditioner: a deterministic solve)."""
    key = (str(case.path), case.effective_json(), policy.name, registry.get(pc).name)
    return _calibrate(key, case, policy, pc, run_case)


#: calibration counts by (case file, effective case, precision, preconditioner): a deterministic solve, made once
_CAL_RESULTS: dict = {}


def _calibrate(key, case, policy: Precision, pc, run_case) -> dict | None:
    if key in _CAL_RESULTS:
        return _CAL_RESULTS[key]
    coarse, mesh_txt = calibration_case(case, pc)
    out = None
    if coarse is not None:
        try:
            out = _solve_counts(coarse, policy, run_case)
        except CaseError:
            # a system the working precision cannot hold: the run's own error (its scale), not the coarse copy's
            prob.check_scales(prob.build(case), policy.storage_bytes)
            raise
        out["mesh"] = mesh_txt
    if len(_CAL_RESULTS) > 256:
        _CAL_RESULTS.clear()
    _CAL_RESULTS[key] = out
    return out


def _solve_counts(coarse, policy: Precision, run_case) -> dict:
    """Iterations of the coarse copy's NumPy run: reported, to the recursive residual's first crossing of rtol
    (the count before the run's block and stall structure), and how it ended."""
    res = run_case(coarse, "numpy", policy)
    m = res.metrics
    rec = list(res.series.get("residual_recursive", []))
    rtol = coarse.solve.rtol
    its = int(m.get("iterations", 0))
    to_rtol = next((i for i, r in enumerate(rec) if 0 <= r <= rtol), None)
    reason = str(m.get("reason", ""))
    ncomp = 1 if coarse.problem.kind == "poisson" else 2
    return {"unknowns": fem_mesh_size(coarse)[0] * ncomp, "iterations": its,
            "to_rtol": max(int(to_rtol if to_rtol is not None and not policy.refinement else its), 1),
            "outer": int(m.get("outer_iterations") or 0), "kappa": float(m.get("kappa_estimate") or math.nan),
            "stopped": "maxiter" not in reason, "reason": reason}
