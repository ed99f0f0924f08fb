"""Time P1 assembly of a 2D Poisson problem (default: 1M DOFs) on this machine.

    python scripts/assembly_speed.py [--n 999] [--repeat 3]

Reports, per phase, the median over repeats: structured mesh generation, stiffness matrix (CSR,
int32 indices), load vector (3-point rule with a sin*sin source), Dirichlet condensation.
"""

import argparse
import json
import time

import numpy as np

from hpcsolve.fem import assembly
from hpcsolve.fem import mesh as meshmod


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=999, help="cells per side; (n+1)^2 nodes (999 -> 1,000,000 DOFs)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    times = {"mesh_s": [], "stiffness_s": [], "load_s": [], "condense_s": []}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        m = meshmod.rectangle(args.n, args.n)
        t1 = time.perf_counter()
        K = assembly.stiffness(m)
        t2 = time.perf_counter()
        b = assembly.load(m, lambda x, y: 2 * np.pi ** 2 * np.sin(np.pi * x) * np.sin(np.pi * y))
        t3 = time.perf_counter()
        fixed = m.boundary_nodes()
        A, rhs, free = assembly.condense(K, b, fixed, np.zeros(len(fixed)))
        t4 = time.perf_counter()
        for k, v in zip(times, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            times[k].append(v)
    med = {k: float(np.median(v)) for k, v in times.items()}
    med["assembly_total_s"] = med["stiffness_s"] + med["load_s"] + med["condense_s"]
    print(json.dumps({"dofs": m.n_points, "triangles": m.n_triangles, "nnz": int(K.nnz),
                      "index_dtype": str(K.indices.dtype), **med}, indent=2))


if __name__ == "__main__":
    main()
