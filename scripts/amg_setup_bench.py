"""AMG set-up and solve times: ``solve(A, b, backend, preconditioner="amg", rtol=1e-8)`` on 2D Poisson
(5-point, from a SciPy matrix) and, with --others, an anisotropic 2D diffusion and the 3D Laplacian; the median of
``--repeat`` runs after one warm-up. Each line: wall time of the call, set-up (report.setup_time_s: upload, check,
hierarchy), the hierarchy's own set-up, the solve, iterations, levels, and a values-only update's numeric set-up
(``update_matrix`` on a prepared matrix with the coefficients doubled).

    python scripts/amg_setup_bench.py --backend cupy --sizes 1023 2047 4095 --repeat 3
    python scripts/amg_setup_bench.py --backend cupy --setup pyamg --sizes 1023      # the host (pyamg) set-up
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import scipy.sparse as sp

from hpcsolve.fem.api import prepare_matrix, solve, update_matrix


def poisson2d(m: int, eps: float = 1.0) -> sp.csr_matrix:
    """(m^2) x (m^2) 5-point Laplacian (Dirichlet), x coupling scaled by eps (anisotropy)."""
    T = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    I = sp.identity(m)
    return sp.csr_matrix(eps * sp.kron(I, T) + sp.kron(T, I))


def poisson3d(m: int) -> sp.csr_matrix:
    T = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    I = sp.identity(m)
    return sp.csr_matrix(sp.kron(sp.kron(I, I), T) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(T, I), I))


def one(A, b, backend, mg):
    t0 = time.perf_counter()
    x, rep = solve(A, b, backend=backend, preconditioner="amg", rtol=1e-8, multigrid=mg)
    wall = time.perf_counter() - t0
    return wall, rep


def bench(name, A, backend, mg, repeat):
    b = np.ones(A.shape[0])
    one(A, b, backend, mg)                         # warm-up (kernels compiled, memory pools filled)
    runs = [one(A, b, backend, mg) for _ in range(repeat)]
    wall = statistics.median(r[0] for r in runs)
    rep = runs[-1][1]
    info = rep.preconditioner
    med = lambda f: statistics.median(f(r[1]) for r in runs)
    # values-only update on a prepared matrix
    M = prepare_matrix(A, backend)
    solve(M, b, preconditioner="amg", rtol=1e-8, multigrid=mg)
    update_matrix(M, A * 2.0)
    _, rep2 = solve(M, b, preconditioner="amg", rtol=1e-8, multigrid=mg)
    i2 = rep2.preconditioner
    print(f"{name:22s} n={A.shape[0]:>10,d} wall {wall:7.3f} s  setup {med(lambda r: r.setup_time_s):7.3f} s  "
          f"hierarchy {med(lambda r: r.preconditioner['setup_time_s']):7.3f} s  solve {med(lambda r: r.time_s):7.3f} s  "
          f"it {rep.iterations:3d} conv {rep.converged}  levels {info['rows']}  opc {info['operator_complexity']:.2f}  "
          f"[{info.get('amg_setup', '')}]  numeric update: hierarchy {i2['setup_time_s']:.3f} s "
          f"({i2.get('setup_kind', '')}, full {i2.get('full_setup_time_s', float('nan')):.3f} s) it {rep2.iterations}",
          flush=True)
    print("    phases:", {k: round(v, 4) for k, v in info["setup_phases_s"].items()}, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cupy")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1023, 2047, 4095])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--setup", default="auto", choices=["auto", "device", "pyamg"])
    ap.add_argument("--hierarchy", default="fp32")
    ap.add_argument("--others", action="store_true", help="also anisotropic 2D (1023^2) and 3D Laplacian (100^3)")
    args = ap.parse_args()
    mg = {"amg_setup": args.setup, "hierarchy": args.hierarchy}
    for m in args.sizes:
        bench(f"poisson2d {m}^2", poisson2d(m), args.backend, mg, args.repeat)
    if args.others:
        bench("aniso2d eps=1e-3 1023^2", poisson2d(1023, 1e-3), args.backend, mg, args.repeat)
        bench("laplace3d 100^3", poisson3d(100), args.backend, mg, args.repeat)


if __name__ == "__main__":
    main()
