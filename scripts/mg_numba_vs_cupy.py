"""Geometric multigrid (fp32 hierarchy, fp64 CG) on CuPy and Numba-CUDA, same matrix, same process:
set-up once, then one warm-up solve and 3 timed solves each (median, min-max).
    python scripts/mg_numba_vs_cupy.py [m ...]      (m x m unknowns; default 1023 2047)"""
import sys

import numpy as np

from hpcsolve.fem.linalg import kernels_cupy
from hpcsolve.fem import solve
from hpcsolve.fem.linalg.precond import multigrid as mgm
from hpcsolve.fem.discrete import testproblems as tp
from hpcsolve.fem.linalg.kernels_numba import view_of

for m in [int(a) for a in sys.argv[1:]] or [1023, 2047]:
    A = kernels_cupy.poisson_5point_device(m)
    b = np.random.default_rng(1).standard_normal(m * m)
    for name, M in (("cupy", A), ("numba-cuda", view_of(A))):
        pc = mgm.Multigrid("mg", {"hierarchy": "fp32"}, grid=tp.fd_grid(m))
        times = []
        for i in range(4):
            x, rep = solve(M, b, preconditioner=pc, rtol=1e-10, maxiter=1000)
            if i:
                times.append(rep.time_s * 1e3)
        print(f"{m}^2 {name:<10} its {rep.iterations} solve {np.median(times):.2f} ms ({min(times):.2f}-{max(times):.2f}) "
              f"true {rep.true_residual:.1e} graphs {M.low.graphs} {getattr(M.low, 'graph_error', None)}", flush=True)
        pc.release(M)
