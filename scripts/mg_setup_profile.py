"""Where the multigrid set-up spends its time (cProfile and the set-up's own phases), on CuPy.
    python scripts/mg_setup_profile.py [m] [mg|amg]     (m x m unknowns, m = 2^k - 1; default 4095 mg)
The profile is of the last of three set-ups (the first compiles the kernels); ``setup_phases_s`` of each is printed."""
import cProfile
import pstats
import sys
import time

from hpcsolve.fem.linalg import kernels_cupy
from hpcsolve.fem.linalg.precond import multigrid as mgm
from hpcsolve.fem.discrete import testproblems as tp

m = int(sys.argv[1]) if len(sys.argv) > 1 else 4095
kind = sys.argv[2] if len(sys.argv) > 2 else "mg"
A = kernels_cupy.poisson_5point_device(m)
for _ in range(3):
    pc = mgm.Multigrid(kind, {"hierarchy": "fp32"}, grid=tp.fd_grid(m) if kind == "mg" else None)
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    pc.setup(A)
    prof.disable()
    print(f"set-up {kind} fp32: {(time.perf_counter() - t0) * 1e3:.1f} ms (setup_time_s {pc.setup_time_s * 1e3:.1f} ms, "
          f"symmetry check {pc.symmetry_check_s * 1e3:.1f} ms); phases (ms) "
          + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in pc.setup_phases_s.items()), flush=True)
    pc.release(A)
    A.cache.pop(("structure",) + pc._key, None)      # amg: the next set-up in full, not numeric only
pstats.Stats(prof).sort_stats("cumulative").print_stats(40)
pstats.Stats(prof).sort_stats("tottime").print_stats(15)
