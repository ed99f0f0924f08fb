"""Where the geometric multigrid set-up spends its time (cProfile), on the default GPU backend.
    python scripts/mg_setup_profile.py [m]     (m x m unknowns, m = 2^k - 1; default 4095)"""
import cProfile
import pstats
import sys
import time

from hpcsolve.fem.linalg import kernels_cupy
from hpcsolve.fem.linalg.precond import multigrid as mgm
from hpcsolve.fem.discrete import testproblems as tp

m = int(sys.argv[1]) if len(sys.argv) > 1 else 4095
A = kernels_cupy.poisson_5point_device(m)
for hier in ("fp32", "fp32"):           # the first call compiles the kernels
    pc = mgm.Multigrid("mg", {"hierarchy": hier}, grid=tp.fd_grid(m))
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    pc.setup(A)
    prof.disable()
    print(f"set-up {hier}: {(time.perf_counter() - t0) * 1e3:.1f} ms (setup_time_s {pc.setup_time_s * 1e3:.1f} ms, "
          f"symmetry check {pc.symmetry_check_s * 1e3:.1f} ms)")
    pc.release(A)
pstats.Stats(prof).sort_stats("cumulative").print_stats(28)
