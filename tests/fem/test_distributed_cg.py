"""CG over row blocks of several ranks (hpcsolve.fem.linalg.distributed): the same CG, the same decisions, the
solution of one rank to the solve's tolerance. Ranks are threads with an in-memory communicator
(tests/thread_ranks.py); the mpiexec tests are in tests/lbm/test_distributed.py."""

import sys
from pathlib import Path

import numpy as np
import pytest

from hpcsolve.core import parallel
from hpcsolve.core.errors import CaseError
from hpcsolve.fem import solve
from hpcsolve.fem.discrete import testproblems as tp
from hpcsolve.fem.linalg.distributed import prepare_distributed, row_blocks

sys.path.insert(0, str(Path(__file__).parents[1]))
from thread_ranks import on_ranks  # noqa: E402

#: the preconditioner named: across ranks "auto" is Jacobi (no probe), on one rank it may probe and switch
#: (hpcsolve.fem.linalg.precond.auto), which is not what this file compares
CONFIGS = [dict(preconditioner="jacobi"), dict(method="pcg-jacobi"), dict(precision="mixed", preconditioner="jacobi"),
           dict(precision="mixed", method="ir-restarted", preconditioner="jacobi")]


@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("make", [lambda: tp.poisson_fd(31), lambda: tp.cook(8), lambda: tp.jumps(16, 1e3)],
                         ids=["poisson", "cook", "jumps"])
@pytest.mark.parametrize("config", CONFIGS, ids=["cg", "pcg-jacobi", "cg-reliable", "ir-restarted"])
def test_row_blocks_solve_as_one_rank(make, ranks, config):
    P = make()
    config = dict(config, check_every=1)        # the host checks every iteration: counts comparable to 1-2
    x1, r1 = solve(P.A, P.b, rtol=1e-10, **config)

    def run(comm):
        return solve(prepare_distributed(P.A, comm), P.b, rtol=1e-10, **config)

    out = on_ranks(ranks, run)
    for x, rep in out:
        assert rep.converged and rep.true_residual <= 1e-10
        assert abs(rep.iterations - r1.iterations) <= 2
        assert np.linalg.norm(x - x1) / np.linalg.norm(x1) < 1e-7
        assert np.array_equal(x, out[0][0]) and rep.iterations == out[0][1].iterations   # every rank agrees
    assert f"{ranks} MPI ranks" in out[0][1].notes[-1]


def test_one_rank_is_bitwise_the_plain_solve():
    P = tp.cook(8)
    x1, r1 = solve(P.A, P.b, rtol=1e-10, method="pcg-jacobi")
    x, r = solve(prepare_distributed(P.A, parallel.SingleRank()), P.b, rtol=1e-10, method="pcg-jacobi")
    assert np.array_equal(x, x1) and r.iterations == r1.iterations


def test_halo_sizes_and_blocks():
    P = tp.poisson_fd(15)                      # 5-point stencil: a block needs one grid row of each neighbour
    blocks = row_blocks(P.A.shape[0], 3)
    assert blocks == [(0, 75), (75, 150), (150, 225)]
    mats = on_ranks(3, lambda comm: prepare_distributed(P.A, comm))
    assert [m.n for m in mats] == [75, 75, 75] and [m.ncols - m.n for m in mats] == [15, 30, 15]
    assert all(m.global_n == 225 for m in mats)


def test_errors_name_the_field():
    P = tp.poisson_fd(7)
    with pytest.raises(CaseError) as err:
        row_blocks(4, 5)
    assert err.value.field == "ranks"
    with pytest.raises(CaseError) as err:
        on_ranks(2, lambda comm: solve(prepare_distributed(P.A, comm), P.b, method="spsolve"))
    assert err.value.field == "method"
    with pytest.raises(CaseError) as err:
        on_ranks(2, lambda comm: solve(prepare_distributed(P.A, comm), P.b, preconditioner="amg"))
    assert err.value.field == "preconditioner"
