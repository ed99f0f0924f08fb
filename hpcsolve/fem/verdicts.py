"""Verdicts on a FEM run's reference values (the arithmetic and texts in hpcsolve.core.verdicts):

- ``problem.manufactured``: ``error_l2`` in [0, C_L2 h_max^2] and ``error_h1_seminorm`` in [0, C_H1 h_max] (P2:
  h_max^3 and h_max^2; the constants by dimension and element: :data:`DEFAULT_CONSTANTS`). P1 triangles converge at
  orders 2 and 1, so a fixed number would be too loose on a fine mesh and too tight on a
  coarse one; the bound scales with the mesh's longest edge ``h_max`` (the run's derived parameter). Measured on the
  unit square (mesh.nx = 2 .. 256, fp64, fp32 and mixed alike): C_L2 = error_l2 / h_max^2 = 0.52 .. 0.6925 and
  C_H1 = error_h1_seminorm / h_max = 2.13 .. 2.4674, rising to those limits with the refinement; the defaults
  (:data:`DEFAULT_L2_CONSTANT`, :data:`DEFAULT_H1_CONSTANT`) leave 1.4 times that. ``output.l2_error_constant``
  and ``output.h1_error_constant`` override them.
- ``output.probe_reference``: ``probe_rel_error`` in [0, ``output.probe_tolerance``] (default
  :data:`DEFAULT_PROBE_TOLERANCE`): Cook's membrane at its mesh.nx = 32 is 2.86 % below 23.96 (nx = 16: 9.9 %,
  outside), the manufactured probe at nx = 64 0.020 %.

The precision's error against the discretisation error is not a verdict of this list (a value against a published or
analytic reference): :mod:`hpcsolve.fem.judge` measures it (metrics ``precision_error_ratio``,
``precision_negligible``) and it decides the status of a solve that missed rtol ("accurate_to_discretisation").
"""

from __future__ import annotations

from hpcsolve.core.verdicts import error_bound

DEFAULT_L2_CONSTANT = 1.0
DEFAULT_H1_CONSTANT = 3.5
#: (C_L2, C_H1) by (space dimension, element): the bounds are C_L2 h_max^(p+1) and C_H1 h_max^p for degree p.
#: Measured (fp64, numpy, the generic path): 2D P2 on the unit square, mesh.nx = 2 .. 64: 0.092 .. 0.100 and
#: 0.93 .. 1.081; 3D P1 on the unit cube, nx = 2 .. 24: 0.31 .. 0.544 and 1.76 .. 2.248; 3D P2, nx = 1 .. 12:
#: 0.026 .. 0.070 and 0.38 .. 0.974; each default about 1.4 times the largest, as 2D P1's
DEFAULT_CONSTANTS = {(2, "P1"): (DEFAULT_L2_CONSTANT, DEFAULT_H1_CONSTANT), (2, "P2"): (0.14, 1.5),
                     (3, "P1"): (0.8, 3.2), (3, "P2"): (0.1, 1.4)}
DEFAULT_PROBE_TOLERANCE = 0.05

MANUFACTURED = {"sin_sin": "manufactured solution sin(pi x) sin(pi y)",
                "sin_sin_sin": "manufactured solution sin(pi x) sin(pi y) sin(pi z)"}


def verdicts(case, metrics: dict, derived: dict) -> dict:
    """The verdicts on the values this run measured (module docstring); empty without a reference."""
    out: dict = {}
    out_opts = case.output
    h = derived.get("h_max")
    if case.problem.manufactured and isinstance(h, (int, float)):
        element = case.problem.element
        p = 2 if element == "P2" else 1
        d2, d1 = DEFAULT_CONSTANTS[(int(derived.get("dimension", 2)), element)]
        c2 = out_opts.l2_error_constant or d2
        c1 = out_opts.h1_error_constant or d1
        for name, bound, text in (("error_l2", c2 * h ** (p + 1), f"{c2:g} h_max^{p + 1}"),
                                  ("error_h1_seminorm", c1 * h ** p, f"{c1:g} h_max" + (f"^{p}" if p > 1 else ""))):
            if name in metrics:
                out[name] = error_bound(metrics[name], bound, f"{MANUFACTURED[case.problem.manufactured]}: "
                                                              f"{element} error <= {text}, h_max {h:.4g}")
    if out_opts.probe_reference is not None and "probe_rel_error" in metrics:
        tol = out_opts.probe_tolerance or DEFAULT_PROBE_TOLERANCE
        out["probe_rel_error"] = error_bound(metrics["probe_rel_error"], tol,
                                             f"output.probe_reference {out_opts.probe_reference:g} at the probe")
    return out
