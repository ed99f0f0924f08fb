"""Generated input for Reliability IV (issue 49) item 1: tiny and huge right-hand sides and coefficients in every
precision (norms and energies at 1e-300..1e300), in seeded chunks (each a test of its own, a few seconds long), the
pattern of tests/test_generated_inputs_results.py:

- systems through the API (``hpcsolve.fem.solve``, at most ~600 unknowns): a Poisson matrix (finite differences,
  P1, or a piecewise coefficient with a contrast up to 1e6) scaled by 10^ka, its right-hand side by 10^kb (ka, kb
  in [-300, 300], or near float32's edges 1e+-38 .. 1e+-45), fp64 / fp32 / mixed, none / jacobi / amg, or the
  direct solve. The unit system (ka = kb = 0) is solved once in float64; the scaled system's solution is
  10^(kb - ka) times it. Where that solution and b lie inside float64's normal range (with a margin) and the unit
  solve is one the method must finish (fp64 or mixed with jacobi / the direct solve; fp32 at rtol 1e-4), the
  solve must converge; in every case a converged report must be true: the float64 residual, recomputed here with
  a power-of-two scaling, below rtol, and x = 10^(kb - ka) x_1 to the accuracy rtol allows. Not converged must be
  said with a reason; the only exceptions allowed are the typed hpcsolve errors (never a raw OverflowError, never
  NaN as converged).
- norms and energies: random fields scaled by 10^k (k in [-300, 300]): the LBM steady change, relative L2 error,
  kinetic energy and compare's field_error must equal the unit field's values (scale-free ones exactly to
  round-off; the energy times 10^2k where that is a normal float64, else 0 <= energy <= the smallest normal).

Nothing is timed: a hang is what the outer limit of a chunk (CHUNK_LIMIT_S) reaches. The default suite runs the
first DEFAULT_* chunks of each family, the soak (``-m slow``) the rest. The generators are seeded
(HPCSOLVE_FUZZ_SEED, default 13; one stream per chunk), the counts per class and outcomes printed (pytest -s).
"""

from __future__ import annotations

import math
import random
import warnings
from collections import Counter

import numpy as np
import pytest
import scipy.sparse.linalg as spla

from hpcsolve.core.errors import HpcsolveError
from hpcsolve.fem import solve
from hpcsolve.fem.discrete import testproblems as tp
from test_generated_inputs import SEED, Hang, _chunks, _report, outer_limit

SYSTEM_CHUNK, SYSTEM_CHUNKS, DEFAULT_SYSTEM_CHUNKS = 80, 20, 3
NORM_CHUNK, NORM_CHUNKS, DEFAULT_NORM_CHUNKS = 200, 10, 1
CHUNK_LIMIT_S = 600
#: decimal exponents of a solution kept away from float64's edges (normal range 2.2e-308 .. 1.8e308)
SAFE = 290


def _scaled_residual(A, x, b) -> float:
    """||b - A x|| / ||b||, b and x scaled by the power of two of max |b| first (exact), the norms peak-scaled."""
    e = int(np.frexp(np.max(np.abs(b)))[1])
    bs, xs = np.ldexp(b, -e), np.ldexp(x, -e)
    r = bs - A @ xs
    m = float(np.max(np.abs(r)))
    if not math.isfinite(m):
        return math.inf
    return m * float(np.linalg.norm(r / m)) / float(np.linalg.norm(bs)) if m > 0 else 0.0


class Systems:
    """(class, A, b, keyword arguments of solve, the expected x or None, whether it must converge, info)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def _matrix(self):
        rng = self.rng
        kind = rng.choice(["fd", "p1", "jumps"])
        n = rng.choice([6, 10, 16, 24])
        if kind == "fd":
            P = tp.poisson_fd(n - 1, seed=rng.randint(1, 9))
        elif kind == "p1":
            P = tp.poisson_p1(n, seed=rng.randint(1, 9))
        else:
            P = tp.jumps(n, 10.0 ** rng.uniform(0, 6), blocks=2, seed=rng.randint(1, 9))
        return kind, P

    def _exponent(self) -> int:
        rng = self.rng
        return rng.choice([0, rng.randint(-300, 300), rng.randint(-300, 300), rng.choice([-45, -40, -38, 38, 40])])

    def one(self):
        rng = self.rng
        kind, P = self._matrix()
        ka, kb = self._exponent(), self._exponent()
        precision = rng.choice(["fp64", "fp32", "mixed", "mixed"])
        pc = rng.choice(["none", "jacobi", "jacobi", "amg"])
        method = "spsolve" if precision == "fp64" and rng.random() < 0.15 else None
        rtol = {"fp32": 1e-4}.get(precision, rng.choice([1e-6, 1e-8, 1e-10]))
        kw = {"precision": precision, "rtol": rtol, "maxiter": 3000}
        if method:
            kw["method"] = method
        else:
            kw["preconditioner"] = pc
        A = (P.A * 10.0 ** ka).tocsr() if ka else P.A
        with np.errstate(under="ignore"):
            b = P.b * 10.0 ** kb
        x1 = spla.spsolve(P.A.tocsc(), P.b)
        top = math.log10(float(np.max(np.abs(x1)))) + kb - ka
        bot = math.log10(float(np.min(np.abs(x1[x1 != 0])))) + kb - ka
        inside = -SAFE < bot and top < SAFE and abs(kb) < SAFE
        must = inside and (method is not None or pc in ("jacobi", "amg") and precision != "fp32"
                           or precision == "fp32" and pc != "none")
        info = {"ka": ka, "kb": kb, "n": A.shape[0]}
        return f"{kind}/{precision}/{method or pc}", A, b, kw, x1 * 10.0 ** (kb - ka) if inside else None, must, info

    def inputs(self, n):
        for _ in range(n):
            yield self.one()


def _judge(A, b, x, rep, want, must) -> str:
    """'' where the outcome is right, else what is wrong."""
    if rep.converged:
        if not (np.all(np.isfinite(x)) and math.isfinite(rep.true_residual)):
            return f"converged with a non-finite x or residual ({rep.true_residual})"
        true = _scaled_residual(A, x, b)
        if true > rep.rtol:
            return f"converged, but the true residual is {true:.3e} > rtol {rep.rtol:.0e}"
        if want is not None:
            err = float(np.max(np.abs(x - want)) / np.max(np.abs(want)))
            if err > max(1e-3, 1e6 * rep.rtol):
                return f"converged, but x differs from 10^(kb-ka) x_1 by {err:.3e}"
        return ""
    if not rep.reason:
        return "not converged without a reason"
    if must:
        return f"must converge: {rep.reason}"
    return ""


@pytest.mark.parametrize("chunk", _chunks(SYSTEM_CHUNKS, DEFAULT_SYSTEM_CHUNKS))
def test_generated_scaled_systems_converge_to_the_scaled_solution_or_say_why_not(chunk):
    gen = Systems(f"{SEED}:r4-scales:{chunk}")
    counts, outcomes, failures = Counter(), Counter(), []
    i, name = -1, ""
    try:
        with outer_limit(CHUNK_LIMIT_S):
            for i, (name, A, b, kw, want, must, info) in enumerate(gen.inputs(SYSTEM_CHUNK)):
                counts[name.split("/")[1]] += 1
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        x, rep = solve(A, b, **kw)
                except HpcsolveError as exc:
                    outcomes["typed error"] += 1
                    if must:
                        failures.append((name, i, info, f"must converge, raised {exc}"))
                    continue
                except Exception as exc:           # noqa: BLE001 - what the test is for
                    failures.append((name, i, info, f"{type(exc).__name__}: {exc}"))
                    continue
                outcomes["converged" if rep.converged else "not converged"] += 1
                wrong = _judge(A, b, x, rep, want, must)
                if wrong:
                    failures.append((name, i, info, wrong))
    except Hang:
        failures.append((name, i, {}, f"hang: the chunk's outer limit of {CHUNK_LIMIT_S} s passed"))
    _report("scaled systems", chunk, counts, outcomes)
    assert not failures, f"{len(failures)} failures, first: {failures[:3]}"
    assert sum(counts.values()) == SYSTEM_CHUNK


def _norm_case(rng: random.Random):
    shape = (rng.randint(1, 9), rng.randint(1, 9))
    g = np.random.default_rng(rng.randint(0, 2**31))
    u, v = g.uniform(-1, 1, shape), g.uniform(-1, 1, shape)
    if rng.random() < 0.1:
        v = u.copy()                                   # a zero difference
    k = rng.choice([rng.randint(-300, 300), rng.randint(-300, 300), rng.choice([-308, -160, -154, 154, 300, 307])])
    return u, v, k


@pytest.mark.parametrize("chunk", _chunks(NORM_CHUNKS, DEFAULT_NORM_CHUNKS))
@pytest.mark.filterwarnings("error::RuntimeWarning")    # an over/underflow that reaches NumPy is a missed scaling
def test_generated_norms_and_energies_are_scale_free(chunk):
    from hpcsolve.lbm import observables as obs
    from hpcsolve.report.comparison import field_error

    rng = random.Random(f"{SEED}:r4-norms:{chunk}")
    failures, counts = [], Counter()
    for i in range(NORM_CHUNK):
        u, v, k = _norm_case(rng)
        s = 10.0 ** k
        with np.errstate(under="ignore"):
            su, sv = u * s, v * s
        if not (np.all(np.abs(su[u != 0]) >= np.finfo(float).tiny) and np.all(np.abs(sv[v != 0]) >= 2.3e-308)):
            counts["subnormal entries (skipped)"] += 1
            continue
        counts["fields"] += 1
        checks = {
            "relative_change": (obs.relative_change(su, sv), obs.relative_change(u, v)),
            "relative_l2": (obs.relative_l2(su, sv), obs.relative_l2(u, v)),
            "field_error.rel_l2": (field_error(su, sv)["rel_l2"], field_error(u, v)["rel_l2"]),
            "field_error.rel_max": (field_error(su, sv)["rel_max"], field_error(u, v)["rel_max"]),
        }
        for what, (got, want) in checks.items():
            if not (got == pytest.approx(want, rel=1e-12, abs=0.0) or (math.isinf(got) and math.isinf(want))):
                failures.append((i, k, what, got, want))
        rho, fluid = np.ones(u.shape), np.ones(u.shape, bool)
        e, e1 = obs.kinetic_energy(rho, su, sv, fluid), obs.kinetic_energy(rho, u, v, fluid)
        e1s = e1 * s * s if 2 * abs(k) < 300 else None
        if e1s is not None and e != pytest.approx(e1s, rel=1e-12, abs=0.0):
            failures.append((i, k, "kinetic_energy", e, e1s))
        if 2 * k < -310 and not 0.0 <= e <= np.finfo(float).tiny:
            failures.append((i, k, "kinetic_energy below the range", e, 0.0))
        if 2 * k > 310 and not e == math.inf:
            failures.append((i, k, "kinetic_energy above the range", e, math.inf))
    print(f"\nnorms chunk {chunk} (seed {SEED}): {dict(counts)}")
    assert not failures, f"{len(failures)} failures, first: {failures[:3]}"
