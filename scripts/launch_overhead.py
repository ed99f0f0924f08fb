"""Host cost of one kernel launch from Python, Numba-CUDA against CuPy (Numba-CUDA's multigrid set-up is made
of many small launches): a kernel of the shape the FEM low-level ops launch (two float64 arrays, an int32 size
and a float64 scale; 1,024 elements, so the GPU time is negligible) launched N times back to back on one stream,
timed to the last launch's completion; then how many launches the multigrid set-up of a FEM run makes on
Numba-CUDA (``NumbaOps._go`` counted).

    python scripts/launch_overhead.py [--n 5000] [--case cases/poisson_manufactured.toml --set mesh.nx=2048 ...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

SRC = r"""
extern "C" __global__ void axpy(const int n, const double* __restrict__ x, double* __restrict__ y, const double a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""


def cupy_us(n: int) -> float:
    import cupy as cp  # late: optional GPU module
    k = cp.RawKernel(SRC, "axpy")
    x, y = cp.ones(1024), cp.zeros(1024)
    args = (np.int32(1024), x, y, np.float64(1e-9))
    for _ in range(50):
        k((4,), (256,), args)
    cp.cuda.Stream.null.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        k((4,), (256,), args)
    cp.cuda.Stream.null.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def numba_us(n: int) -> float:
    from numba import cuda  # late: optional GPU module

    @cuda.jit
    def axpy(m, x, y, a):
        i = cuda.grid(1)
        if i < m:
            y[i] += a * x[i]

    stream = cuda.stream()
    x, y = cuda.to_device(np.ones(1024)), cuda.to_device(np.zeros(1024))
    for _ in range(50):
        axpy[4, 256, stream](np.int32(1024), x, y, np.float64(1e-9))
    stream.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        axpy[4, 256, stream](np.int32(1024), x, y, np.float64(1e-9))
    stream.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def setup_launches(case_path: str, overrides: list[str]) -> tuple[int, float]:
    """(launches through NumbaOps._go, seconds) of the multigrid set-up of the case's warm run on Numba-CUDA."""
    from hpcsolve.core.cases import load_case  # late: only for the set-up's launch count
    from hpcsolve.core.precision import get_precision  # late: only for the set-up's launch count
    from hpcsolve.fem import runner  # late: only for the set-up's launch count
    from hpcsolve.fem.linalg import kernels_numba  # late: only for the set-up's launch count

    case = load_case(case_path, overrides)
    policy = get_precision(case.run.precision, family="fem")
    runner.run(case, "numba-cuda", policy)
    from hpcsolve.fem.linalg.precond import multigrid  # late: only for the set-up's launch count

    count, inside = [0], [False]
    real_go, real_setup = kernels_numba.NumbaOps._go, multigrid.Multigrid.setup

    def counted(self, *args):
        count[0] += inside[0]
        return real_go(self, *args)

    def setup(self, A):
        inside[0] = True
        try:
            return real_setup(self, A)
        finally:
            inside[0] = False

    kernels_numba.NumbaOps._go, multigrid.Multigrid.setup = counted, setup
    try:
        res = runner.run(case, "numba-cuda", policy)
    finally:
        kernels_numba.NumbaOps._go, multigrid.Multigrid.setup = real_go, real_setup
    return count[0], float(res.timings.get("preconditioner_setup_s", float("nan")))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--case")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    args = ap.parse_args()
    c, nb = cupy_us(args.n), numba_us(args.n)
    print(f"launch, {args.n} back to back: CuPy RawKernel {c:.1f} us, Numba-CUDA {nb:.1f} us ({nb - c:+.1f} us)")
    if args.case:
        n, s = setup_launches(args.case, args.overrides)
        print(f"Numba-CUDA multigrid set-up: {n} launches through NumbaOps._go (set-up "
              f"{s:.4f} s); x {nb - c:.1f} us = {n * (nb - c) / 1e6:.4f} s of launch cost beyond CuPy's")


if __name__ == "__main__":
    main()
