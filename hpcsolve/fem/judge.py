"""An FEM run judged against its discretisation: is the precision's error small against the error the mesh makes
anyway?

A P1 solution on a mesh of size h is off the true solution by the discretisation error (O(h^2) in L2, O(h) in the
H1 seminorm); solving its linear system in float32 (or 16-bit, or to a loose rtol) adds a second error, the
precision's. The user's question is whether the second is small against the first, not whether the residual reached
``rtol``: fp32 CG on the manufactured Poisson case stalls at a true residual of about 1e-4 (64^2 .. 256^2) while its
solution differs from the float64 one by 6e-7 .. 3e-6, far below the discretisation error (2e-5 .. 3e-4).
Measured here (NumPy, Jacobi-PCG, relative L2): precision_error_ratio 1.5e-5, 6.8e-5, 1.0e-3, 3.7e-3, 0.039 at
mesh.nx = 16, 32, 64, 128, 256 (0.064 at 256 with mg): the discretisation error falls as h^2, fp32's error does not,
so fp32 stops being negligible on this case somewhere between nx = 256 and 512 (extrapolated from the tenfold
growth from 128 to 256, not measured); the ratio says where.

The metrics (``summary.json``, the names :mod:`hpcsolve.report` keys on):

- ``discretisation_error``: the float64 solution's error on this mesh, relative, in the norm
  ``discretisation_error_norm`` says; the float64 solution is the run's float64 reference (SciPy SuperLU of the same
  system, ``hpcsolve.fem.reference``), or the run's own solution where no reference was made (then the source says
  so: for a non-float64 run it includes the precision's error).
- ``discretisation_error_source``: ``"analytic"`` (against the manufactured solution: relative L2,
  ``||u_h - u||_L2 / ||u||_L2`` by the 6-point rule of ``problem.error_norms``) or ``"estimate: ..."`` (below).
- ``precision_error``: this run's solution against the float64 reference, ``||u_run - u_ref|| / ||u||``, in the SAME
  norm and with the same denominator as ``discretisation_error``; None where no reference was made.
- ``precision_error_ratio`` = ``precision_error / discretisation_error`` and ``precision_negligible`` =
  ``ratio <= NEGLIGIBLE_FRACTION`` (None where either is unknown).

The estimate where no exact solution is known (Cook's membrane, the heat plate, a mesh file) is a recovery-based
a-posteriori estimate in the same relative L2 norm (:func:`recovery_estimate`): the cell gradients of u_h averaged to
the nodes (Zienkiewicz-Zhu recovery, area weights), then on every edge the quadratic that matches u_h at its two ends
and the recovered gradients' difference along it, (G_i - G_j).(x_j - x_i) / 8 above u_h at the midpoint (exact for a
quadratic u); the L2 norm of that P2 correction u* - u_h, integrated exactly, estimates ||u - u_h||_L2. Why this:

- it costs O(n) on the solution the run already has: no second solve. A twice-refined run (the other choice) needs a
  float64 solve of four times the unknowns, about 8x the reference's SuperLU time (n^1.5), on every run with a
  reference; a coarsened run needs nested meshes, which Cook's mapped grid and the mesh files do not give;
- it works on any mesh (files, refined meshes) and any number of components (elasticity: both displacements);
- it is in the analytic case's norm (relative L2), so one ratio and one NEGLIGIBLE_FRACTION mean the same thing on
  every case. Plain ZZ estimates the H1-seminorm error (effectivity 1.01 here), but fp32's error is 5-11x smaller
  against the discretisation error in H1 than in L2 (manufactured case, nx = 64 / 256: 2.1e-4 / 3.4e-3 against
  1.0e-3 / 0.039): an H1 verdict would pass fp32 on meshes where L2 fails it;
- validated on the manufactured case where the true L2 error is known (``tests/fem/test_discretisation_judge.py``:
  ``estimate / true error`` within :data:`RECOVERY_EFFECTIVITY_RANGE` at mesh.nx = 16 and 32; measured 0.62, 0.68,
  0.71, 0.72, 0.72 at nx = 8, 16, 32, 64, 128). It measures the interpolation part of the error and misses the
  Galerkin solution's own nodal error, so it UNDER-estimates by about 1.4x: the ratio it gives is about 1.4x too
  large, which errs on the side of calling a precision's error not negligible. On Cook's membrane it falls as
  h^1.8 .. 1.9 (relative 2.9e-3, 7.9e-4, 2.1e-4 at nx = 16, 32, 64), as the probe's error does; on unstructured meshes
  and near singularities recovery estimates are reliable up to a constant rather than exact (not measured here).

Status (``runner``): a solve that missed ``rtol`` (stalled, or ran out of iterations) but whose precision error is
negligible ends with status :data:`ACCURATE_STATUS` ("accurate_to_discretisation"), and ``hpcsolve run`` exits 0 for
it: the user's question (a solution as accurate as the mesh allows) is answered; the message still says the residual
missed rtol. Without a float64 reference (large systems: ``solve.reference``) nothing is measured and such a run stays
"not_converged" (exit 3).
"""

from __future__ import annotations

import math

import numpy as np

from hpcsolve.core.backends import to_host
from hpcsolve.fem.discrete import assembly
from hpcsolve.fem.discrete import problem as prob

#: the precision's error counts as negligible up to this fraction of the discretisation error: a tenth changes the
#: total error (the two add at most, or in quadrature if unrelated) by at most 10 % (0.5 % in quadrature)
NEGLIGIBLE_FRACTION = 0.1

#: the status of a run whose solve missed rtol but whose solution is as accurate as its mesh allows (exit 0)
ACCURATE_STATUS = "accurate_to_discretisation"

#: estimate / true L2 error of :func:`recovery_estimate` that the tests accept on the manufactured case (measured
#: 0.68 and 0.71 at nx = 16 and 32): within a factor 2, from below
RECOVERY_EFFECTIVITY_RANGE = (0.5, 1.0)

L2 = "relative L2"
RECOVERY_SOURCE = "estimate: gradient recovery (ZZ) of the float64 solution, P2 edge correction"


def _xp(mesh):
    """The array module of ``mesh``: a DeviceMesh's (CuPy where the system was assembled on a GPU), else NumPy."""
    return getattr(mesh, "xp", np)


def _triangle_values(mesh, v):
    """(areas (m,), nodal values per triangle (m, 3, k)) of a P1 field ``v`` of shape (n,) or (n, k), as arrays of
    the mesh's array module."""
    xp = _xp(mesh)
    v = xp.asarray(v, dtype=xp.float64)
    v = v[:, None] if v.ndim == 1 else v
    area, _, _ = assembly._gradients(mesh)
    return xp.abs(area), v[mesh.triangles]


def _p1_squares(area, d) -> float:
    """sum_T int_T |w|^2 of the P1 field w with nodal values ``d`` (m, 3, k): |T|/12 (sum d_i^2 + (sum d_i)^2),
    exact for P1."""
    return float((area[:, None] / 12.0 * ((d * d).sum(1) + d.sum(1) ** 2)).sum())


def _unit_scaled(v) -> tuple[np.ndarray, float]:
    """(v / s, s) with s the largest finite |v| (1 where there is none): the norms below square values, which
    overflow for a solution of 1e160 (the case's own range allows it) and lose one of 1e-170; both are linear in v."""
    v = np.asarray(v, dtype=np.float64)
    a = np.abs(v[np.isfinite(v)])
    s = float(a.max()) if a.size and a.max() > 0 else 1.0
    return v / s, s


def l2_norm(mesh, v) -> float:
    """||v||_L2 of a P1 field ``v`` (n,) or (n, k) given on the host (components summed), exactly; computed where
    the mesh is (a DeviceMesh: on its device, one float comes back; on the host the norms of a 1 M-node mesh took
    seconds, against a GPU run of about 1 s)."""
    if hasattr(mesh, "dofmap"):            # the generic path (P2, tetrahedra): its own quadrature
        from hpcsolve.fem.discrete import simplex_problem  # late: the generic path's module, only for its meshes

        return simplex_problem.l2_norm(mesh, v)
    v, s = _unit_scaled(v)
    area, d = _triangle_values(mesh, v)
    return s * math.sqrt(_p1_squares(area, d))


def _recovered_gradient(mesh, u):
    """Zienkiewicz-Zhu recovery: each node's area-weighted mean of the constant gradients of the triangles around it,
    (n, k, 2) for a field of k components (arrays of the mesh's array module)."""
    xp = _xp(mesh)
    area, bx, by = assembly._gradients(mesh)
    area = xp.abs(area)
    tris = mesh.triangles
    u = xp.asarray(u, dtype=xp.float64)
    d = (u[:, None] if u.ndim == 1 else u)[tris]                          # (m, 3, k)
    n = int(mesh.points.shape[0])
    flat = tris.ravel()
    weight = xp.maximum(xp.bincount(flat, weights=xp.repeat(area, 3), minlength=n), 1e-300)
    out = xp.empty((n, d.shape[2], 2))
    for axis, b in enumerate((bx, by)):
        g = xp.einsum("mi,mik->mk", b, d) * area[:, None]                  # |T| du/dx per cell and component
        for c in range(d.shape[2]):
            out[:, c, axis] = xp.bincount(flat, weights=xp.repeat(g[:, c], 3), minlength=n) / weight
    return out


def recovery_estimate(mesh, u) -> float:
    """An estimate of ||u - u_h||_L2 (module docstring): the L2 norm of the P2 edge correction that the recovered
    gradients give, integrated exactly: |T| 4/45 (sum m_e^2 + (sum m_e)^2) per triangle for edge-midpoint values
    m_e (the bubbles 4 lambda_i lambda_j). ``u`` on the host; computed where the mesh is (as :func:`l2_norm`)."""
    xp = _xp(mesh)
    u, s = _unit_scaled(u)
    G = _recovered_gradient(mesh, u)
    area, _, _ = assembly._gradients(mesh)
    area = xp.abs(area)
    tris, pts = mesh.triangles, xp.asarray(mesh.points, dtype=xp.float64)
    mids = []
    for i, j in ((1, 2), (2, 0), (0, 1)):
        a, b = tris[:, i], tris[:, j]
        mids.append(xp.einsum("mkd,md->mk", G[a] - G[b], pts[b] - pts[a]) / 8.0)
    m = xp.stack(mids, axis=1)                                             # (m, 3 edges, k)
    return s * math.sqrt(float((4.0 * area[:, None] / 45.0 * ((m * m).sum(1) + m.sum(1) ** 2)).sum()))


def solution_metrics(disc, u, u_ref, own_is_float64: bool, exact_error: float | None = None,
                     fraction: float = NEGLIGIBLE_FRACTION) -> dict:
    """The metrics of the module docstring for the run's (full) solution ``u``; ``u_ref``: the float64 reference's
    full solution, or None where none was made (then the discretisation error is measured on ``u`` itself, and
    ``own_is_float64`` says whether that is a float64 solution). ``exact_error``: the L2 error against the
    manufactured solution of the solution measured (``u_ref``, else ``u``) where the run measured it already
    (``reference_error_l2``, ``error_l2``); else it is measured here."""
    u = to_host(u)
    u_ref = None if u_ref is None else to_host(u_ref)
    base = u_ref if u_ref is not None else u
    dm = getattr(disc, "device_mesh", None)        # where the system was assembled on a device: the norms there
    if disc.exact is not None:
        u_ex, grad_ex = disc.exact
        if dm is not None and not hasattr(dm, "dofmap"):      # the 2D P1 device mesh: its norms on the device
            scale = prob.error_norms(dm, dm.xp.zeros(dm.n_points), u_ex, grad_ex)[0]
        else:                   # the generic path keeps the norm from the run's error pass (simplex_problem)
            scale = prob.exact_l2_norm(dm if dm is not None else disc.mesh, u_ex)
        disc_err = exact_error if exact_error is not None else prob.error_norms(disc.mesh, base, u_ex, grad_ex)[0]
        source = "analytic"
    elif hasattr(disc.mesh, "dofmap"):     # P2 / tetrahedra: the recovery estimate is written for P1 triangles
        out = {"discretisation_error": None, "discretisation_error_source": "not estimated: gradient recovery is "
               "written for P1 triangles (give a case with an exact solution)", "discretisation_error_norm": L2}
        if u_ref is None:
            out.update(precision_error=None, precision_error_ratio=None, precision_negligible=None)
            return out
        where = dm if dm is not None else disc.mesh
        perr = l2_norm(where, np.asarray(u, dtype=np.float64) - np.asarray(u_ref, dtype=np.float64))
        scale = l2_norm(where, u_ref)
        out.update(precision_error=perr / scale if scale > 0 else perr, precision_error_ratio=None,
                   precision_negligible=None, negligible_fraction=fraction)
        return out
    else:
        where = dm if dm is not None else disc.mesh
        scale, disc_err, source = l2_norm(where, base), recovery_estimate(where, base), RECOVERY_SOURCE
    if u_ref is None:
        source += (" (on this run's own float64 solution: no float64 reference made)" if own_is_float64 else
                   " (on this run's own solution: no float64 reference made, so it includes the precision's error)")
    rel = disc_err / scale if scale > 0 else disc_err
    out = {"discretisation_error": rel, "discretisation_error_source": source, "discretisation_error_norm": L2}
    if u_ref is None:
        out.update(precision_error=None, precision_error_ratio=None, precision_negligible=None)
        return out
    d = np.asarray(u, dtype=np.float64) - np.asarray(u_ref, dtype=np.float64)
    perr = l2_norm(dm if dm is not None else disc.mesh, d)
    perr = perr / scale if scale > 0 else perr
    ratio = perr / rel if rel > 0 else (0.0 if perr == 0 else math.inf)
    ratio = ratio if math.isfinite(perr) else math.nan
    out.update(precision_error=perr, precision_error_ratio=ratio,
               precision_negligible=bool(math.isfinite(ratio) and ratio <= fraction), negligible_fraction=fraction)
    return out


def judge_solution(metrics: dict, fraction: float | None = None) -> tuple[bool | None, str]:
    """Whether an FEM run's solution is as accurate as its discretisation allows, and why.

    Contract: ``metrics`` is a run's ``summary.json["metrics"]`` (or ``Result.metrics``); reads
    ``precision_error``, ``discretisation_error``, ``precision_error_ratio``, ``discretisation_error_source`` and
    ``discretisation_error_norm``; pure (no I/O, no arrays). ``fraction``: the bound on the ratio (default: the
    run's own ``negligible_fraction``, else :data:`NEGLIGIBLE_FRACTION`). Returns:

    - ``(True, reason)``: precision_error_ratio <= fraction (the precision's error is negligible);
    - ``(False, reason)``: the ratio is above it, or not a finite number (a solve that blew up);
    - ``(None, reason)``: nothing to judge by (an LBM run, an FEM run without a float64 reference, an older
      summary without these metrics).

    ``reason`` is one line for a table or a verdict, e.g. "precision error 2.1e-07 = 0.0034 x the discretisation
    error 6.2e-05 (analytic, relative L2): negligible (<= 0.1)"."""
    frac = float(fraction if fraction is not None else metrics.get("negligible_fraction") or NEGLIGIBLE_FRACTION)
    ratio, perr, derr = (metrics.get(k) for k in ("precision_error_ratio", "precision_error", "discretisation_error"))
    if derr is None:
        return None, "no discretisation error measured (not an FEM run with an exact solution or a float64 reference)"
    if ratio is None or perr is None:
        return None, "no precision error measured: no float64 reference was made (solve.reference)"
    src = metrics.get("discretisation_error_source", "")
    src = "analytic" if src.startswith("analytic") else "estimate" if src.startswith("estimate") else src
    head = (f"precision error {float(perr):.2g} = {float(ratio):.2g} x the discretisation error {float(derr):.2g} "
            f"({src}, {metrics.get('discretisation_error_norm', '')})")
    if not math.isfinite(float(ratio)):
        return False, f"precision error {perr} is not a finite number"
    if float(ratio) <= frac:
        return True, f"{head}: negligible (<= {frac:g})"
    return False, f"{head}: not negligible (> {frac:g})"


def status(converged: bool, metrics: dict) -> str:
    """The run's status: "converged"; :data:`ACCURATE_STATUS` for a solve that missed rtol but whose precision
    error is negligible (:func:`judge_solution`); else "not_converged"."""
    if converged:
        return "converged"
    return ACCURATE_STATUS if judge_solution(metrics)[0] is True else "not_converged"
