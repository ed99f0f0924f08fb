#!/usr/bin/env python3
"""Mutation check of the numerical core: does the default test suite notice a one-point bug?

Each mutant below is one small edit of one file (an operator, a constant, an index, a swapped pair). The script
applies them one at a time to a *copy* of the tree and runs the tests there; the working tree is never touched.

How to run (from the repository root, with the project's virtualenv first on PATH)::

    .venv/bin/python scripts/mutation_check.py --list              # the mutants
    .venv/bin/python scripts/mutation_check.py                     # all of them, one job
    .venv/bin/python scripts/mutation_check.py --only lbm-eq-usq fem-cheby-rho   # some
    .venv/bin/python scripts/mutation_check.py --jobs 2            # two copies side by side (one pytest worker each)
    .venv/bin/python scripts/mutation_check.py --full              # the full default selection for every mutant

The copy: ``git archive HEAD`` (the committed code; others' uncommitted edits stay out) unpacked into
``/tmp/mut/w<job>`` (``--worktree`` copies the working tree's tracked and untracked-not-ignored files instead);
pytest runs there with ``PYTHONPATH=<copy>`` and ``PYTHONDONTWRITEBYTECODE=1`` (no stale bytecode of an
equal-sized edit), and the script checks that ``import hpcsolve`` in the copy resolves to the copy (the venv's
editable install of /work/main must not win).

Per mutant:

1. the original snippet must occur exactly once in its file (else the mutant is reported ``invalid``);
2. **targeted stage**: the test files mapped to the mutated module, ``-x -n 0`` (stops at the first failure);
3. only if it survives: **full stage**, the default selection of ``scripts/test.sh``:
   ``-m "not cudasim and not gpu and not slow"`` and, for code that Numba kernels run (``cudasim=True``),
   ``NUMBA_ENABLE_CUDASIM=1 -m "cudasim and not slow"``; ``--full`` runs it for every mutant.

**What counts as a kill**: a test of the run fails (pytest exit status 1), it is not a source-hash test, and it
passes when run alone on the unmutated copy (a test that fails there too -- broken or flaky at HEAD -- is
deselected for the rest of the run, the stage runs again, and the report lists it; ``--deselect`` names such tests
up front). The
hash tests (:data:`HASH_TESTS`: the sha256 of the generated CUDA C / Numba sources and of the FEM module's tokens)
are deselected in every run, so a mutant that only changes a hashed text is killed by behaviour or not at all.
A collection error or a crash of the whole run (exit status 2-4) is reported as ``error``, not a kill. The
killing test's id (the first ``FAILED`` line) and the time are recorded.

Output: ``docs/measured/mutation_check_<date>.json`` and ``.md`` (``--out`` changes the stem): one row per mutant
(id, file, description, result, killed by, stage, seconds) and the score (killed / valid mutants).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import io
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: source-hash tests: a failure here does not count as a kill (deselected in every run)
HASH_TESTS = (
    "tests/lbm/test_kernel_sources.py::test_generated_kernels_are_unchanged",
    "tests/fem/test_fused.py::test_the_cuda_module_is_the_hand_written_one_token_for_token",
)

#: tests found failing on the unmutated copy during a run (broken or flaky at HEAD): deselected from then on, listed
#: in the report
BROKEN: set[str] = set()
_BROKEN_LOCK = threading.Lock()

#: the commit the copies were made from (the report's "code"); None for a working-tree copy
COPIED_COMMIT: str | None = None

DEFAULT_MARK = "not cudasim and not gpu and not slow"
CUDASIM_MARK = "cudasim and not slow"

KL = "tests/lbm/test_mutation_kills_lbm.py"
KF = "tests/fem/test_mutation_kills.py"


@dataclasses.dataclass(frozen=True)
class Mutant:
    id: str
    file: str
    description: str
    old: str
    new: str
    targets: tuple[str, ...]
    cudasim: bool = False          # Numba kernels run this code: the full stage adds the simulator stage


def M(id, file, description, old, new, targets, cudasim=False):
    return Mutant(id, file, description, old, new, tuple(targets), cudasim)


LBM_REF = ("tests/lbm/test_lbm_reference.py", "tests/lbm/test_lbm_validation.py")
PHYS = "hpcsolve/lbm/physics.py"
FP16C = "hpcsolve/core/fp16c.py"
ASM = "hpcsolve/fem/discrete/assembly.py"

MUTANTS: list[Mutant] = [
    # ---- streaming (the NumPy reference's pull indices)
    M("lbm-stream-cx", "hpcsolve/lbm/steppers/kernels_numpy.py", "pull from x + c_x instead of x - c_x",
      "(x - lattice.CX[i]) % nx", "(x + lattice.CX[i]) % nx", (KL,) + LBM_REF),
    M("lbm-stream-wall-opp", "hpcsolve/lbm/steppers/kernels_numpy.py",
      "a link into a wall gathers f*_i(x) instead of f*_opp(i)(x)",
      "lattice.OPPOSITE[i] * n + fluid)", "i * n + fluid)", (KL,) + LBM_REF),
    # ---- equilibrium and moments
    M("lbm-eq-usq", PHYS, "equilibrium: 1.5 u^2 -> 4.5 u^2", "usq = C15 * (ux * ux + uy * uy)",
      "usq = C45 * (ux * ux + uy * uy)", (KL,) + LBM_REF, True),
    M("lbm-eq-diag-weight", PHYS, "equilibrium: diagonal 5 takes the axis weight 1/9",
      "e5 = W2 * (drho + rho * THREE * s + bs)", "e5 = W1 * (drho + rho * THREE * s + bs)", (KL,) + LBM_REF, True),
    M("lbm-eq-cu2", PHYS, "equilibrium: 4.5 (c.u)^2 of direction 1 uses ux*uy", "a1 = rho * (C45 * ux * ux - usq)",
      "a1 = rho * (C45 * ux * uy - usq)", (KL,) + LBM_REF, True),
    M("lbm-moments-jy", PHYS, "moments: j_y takes h8 instead of h6 (and h6 for h8)",
      "jy = (h[2] + h[5] + h[6]) - (h[4] + h[7] + h[8])", "jy = (h[2] + h[5] + h[8]) - (h[4] + h[7] + h[6])",
      (KL,) + LBM_REF, True),
    # ---- relaxation
    M("lbm-bgk-index", PHYS, "BGK: direction 3 relaxes towards e[1]", "h[3] - omega * (h[3] - e[3])",
      "h[3] - omega * (h[3] - e[1])", (KL,) + LBM_REF, True),
    M("lbm-trt-asym-sign", PHYS, "TRT: antisymmetric part with the wrong sign",
      "return hi - sym - asym, hj - sym + asym", "return hi - sym + asym, hj - sym - asym", (KL,) + LBM_REF, True),
    M("lbm-trt-magic", PHYS, "TRT: Lambda- = magic * Lambda+ instead of magic / Lambda+",
      "lam_minus = magic / lam_plus", "lam_minus = magic * lam_plus", (KL,) + LBM_REF),
    M("lbm-tau", PHYS, "tau = nu / c_s^2 + 0.45", "return nu / lattice.CS2 + 0.5", "return nu / lattice.CS2 + 0.45",
      (KL,) + LBM_REF),
    M("lbm-layer-bulk", PHYS, "absorbing layer: b/12 -> 2b/3 on the moving populations", "r = b * C112",
      "r = b * C23", (KL, "tests/lbm/test_absorbing_layer.py"), True),
    M("lbm-ramp", PHYS, "smooth start sin^2(pi/2 s/n) -> sin^2(pi s/n)",
      "math.sin(0.5 * math.pi * step / ramp_steps) ** 2", "math.sin(math.pi * step / ramp_steps) ** 2",
      (KL,) + LBM_REF),
    # ---- units
    M("lbm-units-nu", "hpcsolve/lbm/units.py", "lattice viscosity with N + 2 cells (3 % Reynolds error at N = 64)",
      "return self.lattice_velocity * self.resolution / self.reynolds",
      "return self.lattice_velocity * (self.resolution + 2) / self.reynolds", (KL,) + LBM_REF),
    M("lbm-units-dx", "hpcsolve/lbm/units.py", "dx = L / (N - 1)", "return self.length / self.resolution",
      "return self.length / (self.resolution - 1)", (KL,) + LBM_REF),
    M("lbm-units-pressure", "hpcsolve/lbm/units.py", "pressure without c_s^2",
      "return lattice.CS2 * (rho_lb - 1.0) * self.density", "return (rho_lb - 1.0) * self.density", (KL,) + LBM_REF),
    M("lbm-units-dt", "hpcsolve/lbm/units.py", "dt = dx u_lb / U -> dx / U",
      "return self.dx * self.lattice_velocity / self.velocity", "return self.dx / self.velocity", (KL,) + LBM_REF),
    # ---- walls, moving walls, inlets, outlets, interpolated walls
    M("lbm-moving-wall", PHYS, "moving wall: c_y u_wy enters with a minus", "(cx_i * uwx + cy_i * uwy)",
      "(cx_i * uwx - cy_i * uwy)", (KL,) + LBM_REF, True),
    M("lbm-moving-wall-6", PHYS, "moving wall: 6 w_i c.u -> 2 w_i c.u", "return h_opp_post + SIX * w_i",
      "return h_opp_post + TWO * w_i", (KL,) + LBM_REF, True),
    M("lbm-outlet-abb-sign", PHYS, "pressure outlet: +h*_opp instead of -h*_opp (bounce-back, not anti-)",
      "return -h_opp_post + TWO * w_i * q", "return h_opp_post + TWO * w_i * q",
      (KL, "tests/lbm/test_outlet_rule.py") + LBM_REF, True),
    M("lbm-outlet-char", PHYS, "characteristic outlet: divides by |u_ref|^2 instead of |u_ref|",
      "(ur2 ** HALF + TINY)", "(ur2 + TINY)", (KL, "tests/lbm/test_outlet_rule.py", "tests/scripts/test_outlet_reflection.py"),
      True),
    M("lbm-bouzidi-swap", PHYS, "interpolated bounce-back: weights a, b swapped", "return a * h_near + b * h_far",
      "return b * h_near + a * h_far", (KL, "tests/lbm/test_bouzidi.py"), True),
    M("lbm-bouzidi-q", "hpcsolve/lbm/boundaries/bouzidi.py", "Bouzidi q < 1/2: a = q instead of 2q",
      "a = np.where(near, 2.0 * q, 1.0", "a = np.where(near, 1.0 * q, 1.0", (KL, "tests/lbm/test_bouzidi.py")),
    M("lbm-inlet-table", "hpcsolve/lbm/boundaries/velocity.py", "velocity table: u_x and u_y of the cells swapped",
      "uw = setup.boundary_velocity.reshape(2, -1)[:, cells].astype(compute)",
      "uw = setup.boundary_velocity.reshape(2, -1)[::-1, cells].astype(compute)",
      (KL, "tests/lbm/test_wall_fields.py") + LBM_REF, True),
    # ---- forces and Strouhal
    M("lbm-force-k", "hpcsolve/lbm/boundaries/links.py", "momentum exchange: k = 2 w_i -> w_i",
      "        return m, 2.0 * w\n", "        return m, 1.0 * w\n",
      (KL, "tests/lbm/test_force_links.py")),
    M("lbm-force-m", "hpcsolve/lbm/boundaries/links.py", "momentum exchange: m = 2 -> 1",
      "m = np.full(d.size, 2.0)", "m = np.full(d.size, 1.0)",
      (KL, "tests/lbm/test_force_links.py")),
    M("lbm-cd-half", "hpcsolve/lbm/observables.py", "c_D = F / (rho U^2 D) without the 1/2",
      "q = 0.5 * rho_ref * u_ref * u_ref * length_cells", "q = 1.0 * rho_ref * u_ref * u_ref * length_cells",
      (KL,)),
    M("lbm-strouhal-count", "hpcsolve/lbm/observables.py", "Strouhal: crossings / span instead of (crossings - 1)",
      "freq = (crossings.size - 1) / (crossings[-1] - crossings[0])",
      "freq = crossings.size / (crossings[-1] - crossings[0])", (KL,)),
    M("lbm-strouhal-interp", "hpcsolve/lbm/observables.py", "Strouhal: crossing interpolated with the wrong sign",
      "found = t[idx] - z[idx] * (t[idx + 1] - t[idx])", "found = t[idx] + z[idx] * (t[idx + 1] - t[idx])", (KL,)),
    M("lbm-tg-decay", "hpcsolve/lbm/observables.py", "Taylor-Green analytic decay exp(-nu k^2 t) (factor 2 lost)",
      "decay = math.exp(-2 * viscosity * k * k * time)", "decay = math.exp(-viscosity * k * k * time)",
      (KL,) + LBM_REF),
    M("lbm-poiseuille-ref", "hpcsolve/lbm/observables.py", "Poiseuille analytic profile at cell faces, not centres",
      "y = np.arange(n) + 0.5", "y = np.arange(n) + 1.0", (KL,) + LBM_REF),
    M("lbm-kinetic-energy", "hpcsolve/lbm/observables.py", "kinetic energy without the 1/2",
      "e = float(0.5 * xp.sum(", "e = float(1.0 * xp.sum(", (KL,) + LBM_REF),
    # ---- MLUPS and bandwidth figures
    M("perf-mlups", "hpcsolve/lbm/runner.py", "MLUPS / 1e3 instead of / 1e6 (the audit's survivor)",
      '"mlups": fluid * step / sec / 1e6', '"mlups": fluid * step / sec / 1e3', (KL, "tests/report/test_bench.py")),
    M("perf-bytes-per-cell", "hpcsolve/lbm/steppers/gpu_common.py", "bytes per cell step: 9 s + 1 (reads only)",
      "return 2 * lattice.Q * s + 1, (1 if in_place else 2)", "return lattice.Q * s + 1, (1 if in_place else 2)",
      (KF, KL, "tests/report/test_bench.py")),
    M("perf-copy-bandwidth", "hpcsolve/core/backends.py", "copy bandwidth counts only the bytes read",
      "moved = 2 * nbytes", "moved = 1 * nbytes", (KF, KL, "tests/report/test_bench.py")),
    M("perf-effective-bw", "hpcsolve/report/bench_lbm.py", "effective bandwidth in MB/s labelled GB/s",
      '"effective_bandwidth_GBps": mlups * 1e6 * bpc / 1e9', '"effective_bandwidth_GBps": mlups * 1e6 * bpc / 1e6',
      (KF, KL, "tests/report/test_bench.py")),
    M("perf-cg-bytes", "hpcsolve/fem/linalg/cg_engine.py", "CG bytes per iteration: update_xp counted as 4 n s",
      "return spmv + 3 * n * s + 5 * n * s", "return spmv + 3 * n * s + 4 * n * s", (KF, "tests/fem/test_cg.py")),
    # ---- compare's norms
    M("cmp-rel-max", "hpcsolve/report/comparison.py", "field_error rel_max divided by the L2 norm",
      '"rel_max": scaled.ratio(float(np.max(np.abs(diff))), mref)',
      '"rel_max": scaled.ratio(float(np.max(np.abs(diff))), nref)',
      (KF, "tests/report/test_compare.py")),
    M("cmp-rel-l2", "hpcsolve/report/comparison.py", "field_error rel_l2 takes the sum of |diff| (an L1 norm)",
      '"rel_l2": scaled.ratio(scaled.norm2(diff), nref)', '"rel_l2": scaled.ratio(float(np.sum(np.abs(diff))), nref)',
      (KF, "tests/report/test_compare.py")),
    # ---- 16-bit codecs
    M("fp16c-decode-bias", FP16C, "decode: exponent re-bias off by one", "((e + xp.uint32(127 - BIAS)) << 23)",
      "((e + xp.uint32(128 - BIAS)) << 23)", ("tests/core/test_fp16c.py", "tests/core/test_codecs.py"), True),
    M("fp16c-subnormal-tie", FP16C, "encode: subnormal ties round up instead of to even",
      "q += ((rem > half) | ((rem == half) &", "q += ((rem >= half) | ((rem == half) &",
      ("tests/core/test_fp16c.py", "tests/core/test_codecs.py"), True),
    M("fp16c-normal-even", FP16C, "encode: round-to-even looks at the wrong bit",
      "+ ((an >> 12) & xp.uint32(1))) >> 12", "+ ((an >> 11) & xp.uint32(1))) >> 12",
      ("tests/core/test_fp16c.py", "tests/core/test_codecs.py"), True),
    M("fp16c-overflow", FP16C, "encode: overflow saturates to the largest finite code instead of NaN",
      "xp.minimum(normal, xp.uint32(NAN_BITS))", "xp.minimum(normal, xp.uint32(NAN_BITS - 1))",
      ("tests/core/test_fp16c.py", "tests/core/test_codecs.py"), True),
    M("fp16c-sr-bits", FP16C, "stochastic rounding: 11 random bits instead of 12 (biased)",
      "(u32(ai) * s + u32(ci)) >> u32(20)", "(u32(ai) * s + u32(ci)) >> u32(21)",
      ("tests/core/test_fp16c.py", "tests/core/test_codecs.py"), True),
    M("fp16c-subnormal-decode", FP16C, "decode: subnormal step 2^-24 instead of 2^-25",
      "sub = m.astype(xp.float32) * xp.float32(SUBNORMAL_STEP)",
      "sub = m.astype(xp.float32) * xp.float32(2 * SUBNORMAL_STEP)", ("tests/core/test_fp16c.py", "tests/core/test_codecs.py"),
      True),
    M("codec-pack-swap", "hpcsolve/core/codecs.py", "Numba pair kernel: fp16c word halves swapped in the store",
      'return f"FP16C_PACK_SR{i}({a}, {b}, {seed_a}, {seed_b})"',
      'return f"FP16C_PACK_SR{i}({b}, {a}, {seed_b}, {seed_a})"', ("tests/core/test_codecs.py", "tests/core/test_fp16c.py"),
      True),
    M("codec-fp16s-scale", "hpcsolve/core/precision.py", "fp16s decode: 1 / (scale + 1)",
      "h = h * ct.type(1.0 / self.population_scale)", "h = h * ct.type(1.0 / (self.population_scale + 1))",
      ("tests/core/test_codecs.py", "tests/core/test_fp16c.py") + LBM_REF, True),
    # ---- FEM assembly and load quadrature
    M("fem-load-swap", ASM, "load quadrature: nodes 0 and 1 take each other's midpoints",
      "xp.stack([f[:, 0] + f[:, 2], f[:, 0] + f[:, 1], f[:, 1] + f[:, 2]], axis=1)",
      "xp.stack([f[:, 0] + f[:, 1], f[:, 0] + f[:, 2], f[:, 1] + f[:, 2]], axis=1)",
      (KF, "tests/fem/test_assembly.py")),
    M("fem-load-weight", ASM, "load quadrature weight |T|/3 per midpoint instead of |T|/6 per pair",
      "* (area / 6.0)[:, None]", "* (area / 3.0)[:, None]", (KF, "tests/fem/test_assembly.py")),
    M("fem-load-const", ASM, "constant source: |T|/2 per node", "(float(source) * area / 3.0)",
      "(float(source) * area / 2.0)", (KF, "tests/fem/test_assembly.py")),
    M("fem-grad", ASM, "barycentric gradient: dx of node 0 with the wrong sign", "dx = xp.stack([x2 - x1,",
      "dx = xp.stack([x1 - x2,", (KF, "tests/fem/test_assembly.py")),
    M("fem-mass", ASM, "mass matrix reference (1 + delta)/6", "_MASS_REF = (np.ones((3, 3)) + np.eye(3)) / 12.0",
      "_MASS_REF = (np.ones((3, 3)) + np.eye(3)) / 6.0", (KF, "tests/fem/test_assembly.py")),
    M("fem-plane-stress", ASM, "plane stress shear modulus (1 - nu) instead of (1 - nu)/2",
      "[[1, nu, 0], [nu, 1, 0], [0, 0, (1 - nu) / 2]]", "[[1, nu, 0], [nu, 1, 0], [0, 0, (1 - nu)]]",
      (KF, "tests/fem/test_assembly.py")),
    M("fem-strain-b", ASM, "strain operator: shear row takes bx twice", "B[:, 2, 0::2] = by", "B[:, 2, 0::2] = bx",
      (KF, "tests/fem/test_assembly.py")),
    M("fem-edge-load", ASM, "edge load: whole edge to each node", "w = np.repeat((value[c] * L / 2.0)",
      "w = np.repeat((value[c] * L / 1.0)", (KF, "tests/fem/test_assembly.py")),
    M("fem-condense", ASM, "Dirichlet lifting with the wrong sign", "rhs = b - A @ ud", "rhs = b + A @ ud",
      (KF, "tests/fem/test_assembly.py")),
    # ---- CG coefficients
    M("fem-cg-beta", "hpcsolve/fem/linalg/cg_engine.py", "CG beta = rho_j / rho_{j+1} (inverted)",
      "low.update_xp(self.x, self.p, self.r, self.dinv, ws, rho, pq, (rho1, rho, 1.0))",
      "low.update_xp(self.x, self.p, self.r, self.dinv, ws, rho, pq, (rho, rho1, 1.0))",
      (KF, "tests/fem/test_cg.py"), True),
    M("fem-cg-alpha-r", "hpcsolve/fem/linalg/kernels_numpy_low.py", "CG: r updated with 0.9 alpha",
      "alpha = r.dtype.type(_coef(ws, i_rho, i_pq, 1.0))", "alpha = r.dtype.type(_coef(ws, i_rho, i_pq, 0.9))",
      (KF, "tests/fem/test_cg.py")),
    M("fem-cg-beta-half", "hpcsolve/fem/linalg/kernels_numpy_low.py", "CG: p = r + beta^2 p",
      "        p *= beta\n", "        p *= beta * beta\n", (KF, "tests/fem/test_cg.py")),
    M("fem-cg-alpha-fused", "hpcsolve/fem/linalg/fused.py", "fused description: x += alpha p uses 2 alpha",
      "        x[i] += alpha * pi", "        x[i] += (alpha + alpha) * pi",
      ("tests/fem/test_fused.py", "tests/fem/test_cg_variants.py"), True),
    # ---- smoothers and grid transfers
    M("fem-cheby-rho", "hpcsolve/fem/linalg/precond/cycle.py", "Chebyshev: 1/(2 sigma + rho) (the audit's survivor)",
      "rho_new = 1.0 / (2.0 * sigma - rho)", "rho_new = 1.0 / (2.0 * sigma + rho)", (KF, "tests/fem/test_multigrid.py")),
    M("fem-cheby-first", "hpcsolve/fem/linalg/precond/cycle.py", "Chebyshev: first step 1/up instead of 1/theta",
      "coefs = [(0.0, 1.0 / theta)]", "coefs = [(0.0, 1.0 / up)]", (KF, "tests/fem/test_multigrid.py")),
    M("fem-jacobi-weight", "hpcsolve/fem/linalg/precond/cycle.py", "damped Jacobi omega = weight / (1.1 lambda)",
      "w = opts.jacobi_weight / lam", "w = opts.jacobi_weight / (1.1 * lam)", (KF, "tests/fem/test_multigrid.py")),
    M("fem-lambda-host", "hpcsolve/fem/linalg/precond/cycle.py", "host power iteration on A instead of D^-1 A",
      "        x = dinv * (M @ x)\n", "        x = (M @ x)\n", (KF, "tests/fem/test_multigrid.py")),
    M("fem-prolong-weight", "hpcsolve/fem/linalg/precond/geometric.py", "P1 prolongation: edge midpoints 0.25",
      "xp.where(same, 1.0, 0.5), xp.full(lo.shape, 0.5)", "xp.where(same, 1.0, 0.25), xp.full(lo.shape, 0.5)",
      (KF, "tests/fem/test_multigrid.py")),
    M("fem-vcycle-residual", "hpcsolve/fem/linalg/precond/cycle.py", "V-cycle residual r = b + A x",
      'low.csr_apply(lvl.A, x, B["r"], -1.0, B["b"], 1.0)', 'low.csr_apply(lvl.A, x, B["r"], 1.0, B["b"], 1.0)',
      (KF, "tests/fem/test_multigrid.py")),
    # ---- launch geometry of the GPU kernels (hpcsolve/lbm/steppers/launch.py, both GPU steppers)
    M("launch-blocks", "hpcsolve/lbm/steppers/launch.py", "one-item-per-thread grid n // 256 (the audit's survivor)",
      "return (int(n) + threads - 1) // threads", "return int(n) // threads", (KL,), True),
    M("launch-step-grid", "hpcsolve/lbm/steppers/launch.py", "step grid nx // (block_x cpt)",
      "return (int(nx) + per_block - 1) // per_block, int(ny)", "return int(nx) // per_block, int(ny)", (KL,), True),
    M("launch-fem-grid", "hpcsolve/fem/linalg/kernels_numba.py", "FEM Numba grid one block short (0 for small n)",
      "return max(1, min((n + self.threads - 1) // self.threads, self.max_blocks))",
      "return min((n - 1) // self.threads, self.max_blocks)", (KF, "tests/fem/test_mg_kernels.py"), True),
    M("launch-perturb", "hpcsolve/lbm/steppers/kernels_numba.py", "Numba perturb kernel launched for n, not 9 n items",
      "self._k_perturb[launch.blocks(lattice.Q * n),", "self._k_perturb[launch.blocks(n),",
      (KL, "tests/test_cudasim_paths.py"), True),
    # ---- the generated CUDA C (GPU-only text, checked on the CPU by behaviour: tests/fem/test_mutation_kills.py)
    M("cuda-warp-sum", "hpcsolve/fem/linalg/kernels_cupy.py", "FEM CUDA C warp_sum starts at offset 8 (half the warp)",
      "for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync", "for (int o = 8; o > 0; o >>= 1) v += __shfl_down_sync",
      (KF,)),
    M("cuda-pair-lane", "hpcsolve/lbm/kernels/print_cuda.py", "16-bit pair kernel: the last lane is 30, not 31",
      "(lane == 31) || (px == npairs - 1)", "(lane == 30) || (px == npairs - 1)", (KL,)),
    M("cuda-block-sum", "hpcsolve/fem/linalg/kernels_cupy.py", "FEM CUDA C block sum reads one warp slot too few",
      "a = lane < nw ? sa[lane] : 0.0;\n        b = lane < nw ? sb[lane] : 0.0;\n        a = warp_sum(a);",
      "a = lane < nw - 1 ? sa[lane] : 0.0;\n        b = lane < nw ? sb[lane] : 0.0;\n        a = warp_sum(a);", (KF,)),
    # ---- the steady-state stopping rule (hpcsolve/lbm/monitor.py; added after its rewrite was committed, 8668d8a)
    M("mon-growth-sign", "hpcsolve/lbm/monitor.py", "growth exponent with the step ratio inverted (a developing flow "
      "reads as noise)", "return math.log(late / early) / math.log(late_steps / early_steps)",
      "return math.log(late / early) / math.log(early_steps / late_steps)", ("tests/lbm/test_run_messages.py", KL)),
    M("mon-growth-gate", "hpcsolve/lbm/monitor.py", "stall accepted up to growth 0.6 (a random walk, g = 1/2, passes)",
      "STALL_GROWTH = 0.35", "STALL_GROWTH = 0.6", ("tests/lbm/test_run_messages.py", KL)),
    M("mon-resolution", "hpcsolve/lbm/monitor.py", "16-bit storage resolution 2^-12 instead of 2^-11",
      "return 2.0 ** -(8 * storage.itemsize - 5)", "return 2.0 ** -(8 * storage.itemsize - 4)",
      ("tests/lbm/test_run_messages.py", KL)),
    M("mon-window", "hpcsolve/lbm/monitor.py", "stall window: STALL_CHECKS checks suffice (none left before them)",
      "        if len(checks) <= STALL_CHECKS:\n", "        if len(checks) < STALL_CHECKS:\n",
      ("tests/lbm/test_run_messages.py", KL)),
]


# ------------------------------------------------------------------------------------------------------- the copy
def make_tree(dest: Path, worktree: bool) -> None:
    """A fresh copy of the code at ``dest``: ``git archive HEAD`` or the working tree's files."""
    global COPIED_COMMIT
    COPIED_COMMIT = None if worktree else subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                                         capture_output=True, text=True).stdout.strip()
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    if worktree:
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                               capture_output=True).stdout.decode().split("\0")
        for f in filter(None, files):
            src = ROOT / f
            if src.is_file():
                (dest / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / f)
    else:
        data = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest)
    env = _env(dest)
    got = subprocess.run([sys.executable, "-c", "import hpcsolve; print(hpcsolve.__file__)"], cwd=dest, env=env,
                         capture_output=True, text=True).stdout.strip()
    if not got.startswith(str(dest)):
        raise SystemExit(f"import hpcsolve in the copy resolves to {got!r}, not to {dest}: the copy would not be "
                         f"tested (an editable install wins over PYTHONPATH?)")


def _env(tree: Path, cudasim: bool = False) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1", MPLBACKEND="Agg", PYTHONHASHSEED="0")
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    if cudasim:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


# ------------------------------------------------------------------------------------------------------ one run
#: pytest's short summary line: the node id (parametrize ids may hold spaces) and, after " - ", the message
FAILED = re.compile(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", re.M)


def pytest(tree: Path, args: list[str], cudasim: bool, workers: int, timeout: float) -> tuple[int, str | None, str]:
    """(exit status, first failing test id, its summary line (or the output's tail)) of one pytest run in
    ``tree``."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-rfE",
           "-n", str(workers) if workers > 1 else "0"]
    cmd += [a for t in HASH_TESTS for a in ("--deselect", t)] + args
    try:
        out = subprocess.run(cmd, cwd=tree, env=_env(tree, cudasim), capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, None, "timeout"
    text = out.stdout + out.stderr
    m = FAILED.search(text)
    return out.returncode, (m.group(1) if m else None), (m.group(0)[:300] if m else text[-3000:])


def run_mutant(mu: Mutant, tree: Path, full: bool, workers: int, timeout: float) -> dict:
    path = tree / mu.file
    original = path.read_text()
    row = {"id": mu.id, "file": mu.file, "description": mu.description, "result": None, "killed_by": None,
           "stage": None, "seconds": 0.0}
    if original.count(mu.old) != 1 or mu.old == mu.new:
        row["result"] = f"invalid (snippet found {original.count(mu.old)} times)"
        return row
    t0 = time.perf_counter()
    path.write_text(original.replace(mu.old, mu.new))
    try:
        stages = []
        targets = [t for t in mu.targets if (tree / t.split("::")[0]).exists()]
        if targets and not full:
            stages.append(("targeted", targets + ["-m", "not gpu and not slow"], False))
        stages.append(("full", ["-m", DEFAULT_MARK], False))
        if mu.cudasim:
            stages.append(("full-cudasim", ["-m", CUDASIM_MARK], True))
        for name, args, sim in stages:
            while True:
                skip = [a for t in sorted(BROKEN) for a in ("--deselect", t)]
                code, test, tail = pytest(tree, args + skip, sim, 1 if name == "targeted" else workers, timeout)
                if not (code == 1 and test and test.split("[")[0] not in HASH_TESTS):
                    break
                # confirm: the killing test passes on the unmutated code; one that fails there too (broken or
                # flaky at HEAD) is deselected from then on and the stage runs again
                path.write_text(original)
                again, _, why = pytest(tree, [test, "-m", CUDASIM_MARK if sim else "not gpu"], sim, 1, timeout)
                path.write_text(original.replace(mu.old, mu.new))
                if again == 0:
                    break
                if test in BROKEN:              # deselecting it did not help: report, do not loop
                    row.update(result=f"error ({test} fails unmutated, not deselectable)", stage=name, failure=why)
                    return row
                with _BROKEN_LOCK:
                    BROKEN.add(test)
                print(f"  {test} fails on the unmutated code too: deselected ({why[:120]})", flush=True)
            if code == 1 and test and test.split("[")[0] not in HASH_TESTS:
                row.update(result="killed", killed_by=test, stage=name, failure=tail)
                break
            if code not in (0, 1, 5):
                row.update(result=f"error (exit {code})", stage=name, tail=tail[-1500:])
                break
        else:
            row.update(result="survived", stage="full")
    finally:
        path.write_text(original)
        row["seconds"] = round(time.perf_counter() - t0, 1)
    return row


# ------------------------------------------------------------------------------------------------------ report
def write_report(rows: list[dict], stem: Path, argv: list[str]) -> tuple[int, int]:
    valid = [r for r in rows if r["result"] in ("killed", "survived")]
    killed = sum(r["result"] == "killed" for r in valid)
    commit = COPIED_COMMIT or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                             text=True).stdout.strip()
    data = {"date": _dt.date.today().isoformat(), "commit": commit, "command": " ".join(argv),
            "mutants": len(rows), "valid": len(valid), "killed": killed,
            "score": killed / len(valid) if valid else None, "hash_tests_deselected": list(HASH_TESTS),
            "failing_unmutated_deselected": sorted(BROKEN), "rows": rows}
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    lines = [f"# Mutation check, {data['date']} (code {commit})", "",
             f"`{data['command']}`: {len(rows)} mutants, {len(valid)} valid, **{killed} killed "
             f"({100 * data['score']:.1f} %)**" if valid else "no valid mutant", "",
             "A kill: a default-suite test fails that is not a source-hash test (those are deselected: "
             + ", ".join(f"`{t}`" for t in HASH_TESTS) + "). Stage: `targeted` (the mapped test files, -x), `full` "
             "(the default selection), `full-cudasim` (the simulator stage). How it runs: `scripts/mutation_check.py`.",
             "", "Tests that failed on the unmutated copy as well (deselected after their first failure, no kill): "
             + (", ".join(f"`{t}`" for t in sorted(BROKEN)) or "none") + ".",
             "", "| id | file | mutant | result | killed by | stage | s |", "| --- | --- | --- | --- | --- | --- | ---: |"]
    for r in rows:
        lines.append(f"| {r['id']} | `{r['file']}` | {r['description']} | {r['result']} | "
                     f"{'`' + r['killed_by'] + '`' if r['killed_by'] else ''} | {r['stage'] or ''} | {r['seconds']} |")
    stem.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return killed, len(valid)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--only", nargs="+", metavar="ID", help="run only these mutants")
    ap.add_argument("--jobs", type=int, default=1, help="copies run side by side (each pytest on one worker)")
    ap.add_argument("--full", action="store_true", help="the full default selection for every mutant")
    ap.add_argument("--worktree", action="store_true", help="copy the working tree instead of git archive HEAD")
    ap.add_argument("--workdir", default="/tmp/mut", help="where the copies go")
    ap.add_argument("--timeout", type=float, default=1500, help="seconds per pytest run")
    ap.add_argument("--out", help="report stem (default docs/measured/mutation_check_<date>)")
    ap.add_argument("--update", metavar="STEM", help="an earlier report (STEM.json): the mutants run now replace "
                    "their rows there, the others are kept, and the report is written back to STEM (e.g. after a "
                    "concurrent edit moved a mutant's snippet)")
    ap.add_argument("--baseline", action="store_true",
                    help="run the selected mutants' target files on the unmutated copy (they must pass) and exit")
    ap.add_argument("--deselect", nargs="+", default=[], metavar="TEST",
                    help="tests known to fail on the unmutated code: deselected in every run (listed in the report)")
    args = ap.parse_args(argv)
    BROKEN.update(args.deselect)
    mutants = MUTANTS
    if args.only:
        unknown = set(args.only) - {m.id for m in MUTANTS}
        if unknown:
            ap.error(f"unknown mutant ids: {', '.join(sorted(unknown))}")
        mutants = [m for m in MUTANTS if m.id in args.only]
    if args.list:
        for m in mutants:
            print(f"{m.id:24s} {m.file:45s} {m.description}")
        print(f"{len(mutants)} mutants")
        return 0
    jobs = max(1, min(args.jobs, 2))
    workers = 2 if jobs == 1 else 1          # at most 2 pytest workers in total
    trees = [Path(args.workdir) / f"w{j}" for j in range(jobs)]
    for t in trees:
        make_tree(t, args.worktree)
    if args.baseline:
        files = sorted({t for m in mutants for t in m.targets if (trees[0] / t).exists()})
        code, test, tail = pytest(trees[0], files + ["-m", "not gpu and not slow"], False, workers, args.timeout)
        print(tail[-800:])
        print(f"baseline of {len(files)} target files: exit {code}" + (f", first failure {test}" if test else ""))
        return 0 if code == 0 else 1
    free = list(trees)
    lock = threading.Lock()
    stem = Path(args.out) if args.out else ROOT / "docs" / "measured" / f"mutation_check_{_dt.date.today()}"
    rows: dict[str, dict] = {}

    def one(mu):
        with lock:
            tree = free.pop()
        try:
            row = run_mutant(mu, tree, args.full, workers, args.timeout)
        finally:
            with lock:
                free.append(tree)
        print(f"{row['id']:24s} {row['result']:10s} {row['seconds']:7.1f} s  {row['killed_by'] or ''}", flush=True)
        with lock:
            rows[mu.id] = row
            done = [rows[m.id] for m in mutants if m.id in rows]
            write_report(done, Path(str(stem) + "_partial"), ["scripts/mutation_check.py"] + (argv or sys.argv[1:]))
        return row

    with ThreadPoolExecutor(jobs) as ex:
        list(ex.map(one, mutants))
    ordered = [rows[m.id] for m in mutants]
    for suffix in ("_partial.json", "_partial.md"):
        Path(str(stem) + suffix).unlink(missing_ok=True)
    if args.update:
        stem = Path(args.update)
        old = json.loads(stem.with_suffix(".json").read_text())
        BROKEN.update(old.get("failing_unmutated_deselected", []))
        ordered = [rows.get(r["id"], r) for r in old["rows"]] + [r for r in ordered
                                                                 if r["id"] not in {o["id"] for o in old["rows"]}]
    killed, valid = write_report(ordered, stem, ["scripts/mutation_check.py"] + (argv or sys.argv[1:]))
    print(f"score: {killed}/{valid} killed ({100 * killed / max(valid, 1):.1f} %); report {stem}.md")
    return 0 if valid and killed == valid else 1


if __name__ == "__main__":
    sys.exit(main())
