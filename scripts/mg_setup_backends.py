"""The geometric multigrid set-up of a FEM run on CuPy and on Numba-CUDA side by side (Numba's was 1.5x CuPy's):
``hpcsolve.fem.runner.run`` of the case twice per backend (the first compiles), the warm run's set-up phases
(``preconditioner_info.setup_phases_s``) and, with ``--profile``, cProfile of the warm run's set-up calls.

    python scripts/mg_setup_backends.py cases/poisson_manufactured.toml --set mesh.nx=2048 \\
        --set solve.preconditioner=mg --set solve.rtol=1e-9 [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

from hpcsolve.core.cases import load_case
from hpcsolve.core.precision import get_precision
from hpcsolve.fem import runner
from hpcsolve.fem.linalg.kernels_numba import NumbaOps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case")
    ap.add_argument("--set", action="append", default=[], dest="overrides")
    ap.add_argument("--backends", nargs="+", default=["cupy", "numba-cuda"],
                    help="numba-cuda:own: Numba-CUDA with its power iterations on its own launches (NumbaOps.set_up_on_cupy "
                         "off), as before the launch twin")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    case = load_case(args.case, args.overrides)
    policy = get_precision(case.run.precision, family="fem")
    for backend in args.backends:
        own = backend == "numba-cuda:own"      # the power iterations on Numba's own launches
        if backend.endswith(":own") and not own:
            ap.error(f"{backend}: ':own' is for numba-cuda only")
        backend = backend.removesuffix(":own")
        NumbaOps.set_up_on_cupy = not own
        runner.run(case, backend, policy)
        prof = cProfile.Profile() if args.profile else None
        if prof:
            prof.enable()
        res = runner.run(case, backend, policy)
        if prof:
            prof.disable()
        info = res.metrics.get("preconditioner_info") or {}
        print(f"== {backend}{' (own launches)' if own else ''}: set-up {res.timings.get('preconditioner_setup_s', float('nan')):.4f} s; phases "
              + ", ".join(f"{k} {v:.4f}" for k, v in (info.get("setup_phases_s") or {}).items()), flush=True)
        if prof:
            stats = pstats.Stats(prof).sort_stats("cumulative")
            stats.print_stats(r"precond|lowops|layout|kernels_numba|kernels_cupy|dispatcher.py.*call|_build", 30)


if __name__ == "__main__":
    main()
