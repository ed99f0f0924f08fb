"""Time P1 assembly of a 2D Poisson problem (default: 1M DOFs) on this machine.

    python scripts/assembly_speed.py [--n 999] [--repeat 3]

Reports, per phase, the median over repeats of the wall time and of the process CPU time (the
latter is less sensitive to other jobs on a shared machine): structured mesh generation, stiffness
matrix (CSR, int32 indices), load vector (3-point rule with a sin*sin source), Dirichlet
condensation. "assembly" = stiffness + load + condensation (the mesh is input, not assembly).
"""

import argparse
import json
import os
import time

import numpy as np

from hpcsolve.fem.discrete import assembly
from hpcsolve.fem.discrete import mesh as meshmod


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=999, help="cells per side; (n+1)^2 nodes (999 -> 1,000,000 DOFs)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    phases = ("mesh", "stiffness", "load", "condense")
    wall = {k: [] for k in phases}
    cpu = {k: [] for k in phases}

    def timed(name, fn):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall[name].append(time.perf_counter() - w0)
        cpu[name].append(time.process_time() - c0)
        return out

    for _ in range(args.repeat):
        m = timed("mesh", lambda: meshmod.rectangle(args.n, args.n))
        K = timed("stiffness", lambda: assembly.stiffness(m))
        b = timed("load", lambda: assembly.load(m, lambda x, y: 2 * np.pi ** 2 * np.sin(np.pi * x) * np.sin(np.pi * y)))
        fixed = m.boundary_nodes()
        timed("condense", lambda: assembly.condense(K, b, fixed, np.zeros(len(fixed))))
    out = {"dofs": m.n_points, "triangles": m.n_triangles, "nnz": int(K.nnz), "index_dtype": str(K.indices.dtype),
           "load_average_1min": os.getloadavg()[0], "cores": os.cpu_count()}
    for k in phases:
        out[f"{k}_wall_s"] = float(np.median(wall[k]))
        out[f"{k}_cpu_s"] = float(np.median(cpu[k]))
    out["assembly_wall_s"] = sum(out[f"{k}_wall_s"] for k in phases[1:])
    out["assembly_cpu_s"] = sum(out[f"{k}_cpu_s"] for k in phases[1:])
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
