"""The LBM decomposed into row slabs (hpcsolve.lbm.distributed): bitwise the single-process run.

Most tests run the ranks as threads of this process with an in-memory communicator (the same calls
the stepper makes on mpi4py's); one runs the real thing under ``mpiexec -n 2`` where mpi4py and an
MPI launcher are installed (``pip install 'hpcsolve[mpi]'``), and skips otherwise."""

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcsolve.core import parallel
from hpcsolve.core.errors import BackendError, CaseError
from hpcsolve.lbm.distributed import SlabStepper, local_setup
from hpcsolve.lbm.steppers.stepper import get_stepper
from hpcsolve.core.precision import FP16C, FP16S, FP32, FP64

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))
import lbm_gpu_cases as cases  # noqa: E402
from thread_ranks import on_ranks  # noqa: E402


def _reference(setup, steps):
    s = get_stepper("numpy", setup)
    s.step(steps)
    return s


MAKERS = {**cases.GEOMETRIES, "channel_with_bouzidi": cases.channel_with_bouzidi}


@pytest.mark.parametrize("policy", [FP64, FP32, FP16S, FP16C], ids=lambda p: p.name)
@pytest.mark.parametrize("geometry", sorted(MAKERS) + ["channel_with_layer"])
@pytest.mark.parametrize("ranks", [2, 3])
def test_slabs_step_bitwise_as_one_process(geometry, ranks, policy):
    """fp16c: its stochastic rounding seeds from global cell indices; channel_with_layer: an absorbing layer
    that varies across the slabs (along y)."""
    if geometry == "channel_with_layer":
        from hpcsolve.lbm.boundaries.layer import AbsorbingLayer

        setup = dataclasses.replace(cases.channel(policy=policy, collision="trt"),
                                    absorbing_layer=AbsorbingLayer(c0=-0.5, kx=0.05, ky=0.25, strength=0.7))
    else:
        setup = MAKERS[geometry](policy=policy, collision="trt" if geometry == "channel" else "bgk")
    ref = _reference(setup, 7)

    def run(comm):
        s = SlabStepper("numpy", setup, comm)
        s.step(7)
        return s.populations(), s.macroscopic(), s.finite()

    results = on_ranks(ranks, run)
    for g, (rho, ux, uy), fin in results:          # every rank holds the whole lattice
        assert np.array_equal(g, ref.populations())
        r_rho, r_ux, r_uy = ref.macroscopic()
        assert np.array_equal(rho, r_rho) and np.array_equal(ux, r_ux) and np.array_equal(uy, r_uy)
        assert fin


def test_forces_on_an_obstacle_across_slab_borders_equal_one_process():
    setup = cases.channel_with_bouzidi(nx=12, ny=10)
    mask = cases.obstacle_mask(setup)
    ref = _reference(setup, 9)

    def run(comm):
        s = SlabStepper("numpy", setup, comm)
        s.step(9)
        return s.force(mask), s.slab

    out = on_ranks(3, run)
    obstacle_rows = set(np.flatnonzero(mask.any(axis=1)).tolist())
    borders = {sl.y0 for _, sl in out} - {0}
    # a slab border runs along the obstacle: links from one rank's fluid cells end in the other rank's wall cells
    assert any(b in obstacle_rows and b - 1 not in obstacle_rows for b in borders)
    for f, _ in out:
        assert f == ref.force(mask) and f != (0.0, 0.0)


def test_smooth_start_and_restart_from_the_gathered_state():
    setup = cases.channel(nx=12, ny=9)
    setup.ramp_steps = 6
    ref = _reference(setup, 10)

    def run(comm):
        s = SlabStepper("numpy", setup, comm)
        s.step(4)                                  # inside the smooth start
        g = s.populations()
        t = SlabStepper("numpy", setup, comm)      # a restarted run: the gathered state loaded on every rank
        t.load_populations(g, 4)
        t.step(6)
        return t.populations(), t.time_step

    for g, step in on_ranks(2, run):
        assert step == 10 and np.array_equal(g, ref.populations())


def test_one_rank_is_the_plain_stepper():
    setup = cases.channel_with_bouzidi()
    s = SlabStepper("numpy", setup, parallel.SingleRank())
    s.step(5)
    assert np.array_equal(s.populations(), _reference(setup, 5).populations())
    assert s.decomposition() == {"ranks": 1, "kind": "slabs of rows", "halo_rows": 1, "rows_per_rank": [8]}


def test_slab_rows_and_halos():
    sl = parallel.slabs(10, 3)
    assert [(s.y0, s.y1) for s in sl] == [(0, 4), (4, 7), (7, 10)]
    assert sl[0].local_rows.tolist() == [9, 0, 1, 2, 3, 4] and sl[2].upper == 0 and sl[0].lower == 2
    loc = local_setup(cases.channel_with_bouzidi(), parallel.slabs(8, 2)[1])
    assert loc.flags.shape == (6, 10) and len(loc.links) > 0


def test_too_many_ranks_is_a_case_error_naming_ranks():
    with pytest.raises(CaseError) as err:
        parallel.slabs(4, 5)
    assert err.value.field == "ranks" and "lattice.resolution" in str(err.value)


def test_in_place_streaming_is_refused_on_several_ranks():
    setup = cases.channel()
    setup.in_place = True
    with pytest.raises(BackendError, match="in-place"):
        SlabStepper("numpy", setup, parallel.SingleRank())


def test_a_gpu_backend_on_several_ranks_is_refused_by_name():
    setup = cases.channel()
    with pytest.raises(BackendError, match="'cupy' cannot run on several MPI ranks"):
        on_ranks(2, lambda comm: SlabStepper("cupy", setup, comm))


def test_world_is_one_rank_without_a_launcher_and_refuses_ranks_without_mpi4py(monkeypatch):
    for v in parallel.LAUNCHER_VARIABLES:
        monkeypatch.delenv(v, raising=False)
    assert isinstance(parallel.world(), parallel.SingleRank)           # mpi4py never imported
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setitem(sys.modules, "mpi4py", None)                   # as if not installed
    with pytest.raises(BackendError, match="one of 2 MPI ranks, but mpi4py does not import"):
        parallel.world()
    monkeypatch.setenv("PMI_SIZE", "1")
    assert isinstance(parallel.world(), parallel.SingleRank)


def test_ranks_running_different_cases_are_refused():
    def run(comm):
        parallel.check_same(comm, "case", f"lattice.resolution = {64 if comm.Get_rank() == 0 else 65}")

    with pytest.raises(CaseError, match="differs on rank"):
        on_ranks(2, run)
    on_ranks(2, lambda comm: parallel.check_same(comm, "case", "same text"))


MPI_SCRIPT = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import lbm_gpu_cases as cases
from hpcsolve.core import parallel
from hpcsolve.lbm.distributed import SlabStepper
comm = parallel.world()
s = SlabStepper("numpy", cases.channel_with_bouzidi(nx=12, ny=10), comm)
s.step(25)
g = s.populations()
if comm.Get_rank() == 0:
    np.save(sys.argv[1], g)
    print("ranks", comm.Get_size(), s.decomposition()["rows_per_rank"])
"""


def test_under_mpiexec_two_ranks_equal_one_process(tmp_path):
    pytest.importorskip("mpi4py", reason="mpi4py not installed (pip install 'hpcsolve[mpi]')")
    launcher = shutil.which("mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                             os.environ.get("PATH", "")]))
    if launcher is None:
        pytest.skip("no mpiexec on PATH (pip install 'hpcsolve[mpi]' brings MPICH's)")
    script = tmp_path / "run.py"
    script.write_text(MPI_SCRIPT)
    out = tmp_path / "g.npy"
    proc = subprocess.run([launcher, "-n", "2", sys.executable, str(script), str(out), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ranks 2 [5, 5]" in proc.stdout
    ref = _reference(cases.channel_with_bouzidi(nx=12, ny=10), 25)
    assert np.array_equal(np.load(out), ref.populations())


def _mpiexec():
    pytest.importorskip("mpi4py", reason="mpi4py not installed (pip install 'hpcsolve[mpi]')")
    launcher = shutil.which("mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent),
                                                             os.environ.get("PATH", "")]))
    if launcher is None:
        pytest.skip("no mpiexec on PATH (pip install 'hpcsolve[mpi]' brings MPICH's)")
    return launcher


def _datasets(path):
    import h5py

    out = {}
    with h5py.File(path) as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out


CAVITY = Path(__file__).parents[2] / "cases" / "lid_driven_cavity.toml"
SMALL = ["--set", "lattice.resolution=20", "--set", "time.end_time=3.0", "--set", "time.monitor_interval=40",
         "--set", "time.output_interval=1.0", "--set", "time.checkpoint_interval=120", "--no-plots"]


def test_hpcsolve_run_under_mpiexec_writes_the_single_process_result(tmp_path):
    """`mpiexec -n 2 hpcsolve run`: one result folder (rank 0), fields, series and snapshots bitwise those of
    one process, ranks and decomposition in the provenance; a checkpoint written on two ranks resumes."""
    import json

    launcher = _mpiexec()
    cli = [sys.executable, "-m", "hpcsolve.cli", "run", str(CAVITY), "--backend", "numpy"]
    one, two = tmp_path / "one", tmp_path / "two"
    p1 = subprocess.run(cli + ["--out", str(one), "--quiet"] + SMALL, capture_output=True, text=True, timeout=300)
    assert p1.returncode == 0, p1.stderr[-2000:]
    p2 = subprocess.run([launcher, "-n", "2"] + cli + ["--out", str(two)] + SMALL, capture_output=True, text=True,
                        timeout=300)
    assert p2.returncode == 0, p2.stderr[-2000:]
    assert p2.stdout.count("results in") == 1                  # rank 0 reports
    a, b = _datasets(one / "result.h5"), _datasets(two / "result.h5")
    assert set(a) == set(b) and any(k.startswith("snapshots") for k in a)
    numeric = [k for k in a if np.asarray(a[k]).dtype.kind in "fiub"]
    assert len(numeric) > 10 and all(np.array_equal(a[k], b[k]) for k in numeric)
    prov = json.loads((two / "summary.json").read_text())["provenance"]
    assert prov["ranks"] == 2 and prov["decomposition"]["rows_per_rank"] == [11, 11]
    assert json.loads((one / "summary.json").read_text())["provenance"]["ranks"] == 1
    # resumed on two ranks from the newest checkpoint (--force: the run had finished): the same result again
    p3 = subprocess.run([launcher, "-n", "2", sys.executable, "-m", "hpcsolve.cli", "run", "--resume", str(two),
                         "--force", "--quiet", "--no-plots"], capture_output=True, text=True, timeout=300)
    assert p3.returncode == 0, p3.stderr[-2000:]
    c = _datasets(two / "result.h5")
    assert json.loads((two / "summary.json").read_text())["metrics"]["resumed_from_step"] > 0
    assert all(np.array_equal(a[k], c[k]) for k in numeric)


def test_a_fem_case_under_mpiexec_solves_as_one_process_and_refuses_multigrid(tmp_path):
    """`mpiexec -n 2 hpcsolve run` on the manufactured Poisson case: CG over two row blocks, the same iterations
    and error norms as one process; amg on two ranks: exit 2 naming solve.preconditioner, nothing written."""
    import json

    launcher = _mpiexec()
    case = Path(__file__).parents[2] / "cases" / "poisson_manufactured.toml"
    cli = [sys.executable, "-m", "hpcsolve.cli", "run", str(case), "--backend", "numpy", "--quiet", "--no-plots"]
    p1 = subprocess.run(cli + ["--out", str(tmp_path / "one")], capture_output=True, text=True, timeout=300)
    p2 = subprocess.run([launcher, "-n", "2"] + cli + ["--out", str(tmp_path / "two")], capture_output=True,
                        text=True, timeout=300)
    assert p1.returncode == 0 and p2.returncode == 0, p2.stderr[-2000:]
    m1, m2 = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("one", "two"))
    assert m2["provenance"]["ranks"] == 2 and m2["metrics"]["converged"] and m2["backend"] == m1["backend"] == "numpy"
    rows = m2["provenance"]["decomposition"]["rows_per_rank"]
    assert len(rows) == 2 and abs(rows[0] - rows[1]) <= 1
    assert sum(rows) == m1["provenance"]["decomposition"]["rows_per_rank"][0]
    assert abs(m2["metrics"]["iterations"] - m1["metrics"]["iterations"]) <= 2
    assert m2["metrics"]["error_l2"] == pytest.approx(m1["metrics"]["error_l2"], rel=1e-9)
    # a run that fails together (not converged): rank 0 writes its result before the ranks end (exit 3)
    p = subprocess.run([launcher, "-n", "2"] + cli + ["--out", str(tmp_path / "nc"), "--set", "solve.maxiter=3"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 3, (p.returncode, p.stderr[-1500:])
    nc = json.loads((tmp_path / "nc" / "summary.json").read_text())
    assert nc["status"] == "not_converged" and nc["metrics"]["iterations"] == 3 and (tmp_path / "nc" / "result.h5").exists()
    p = subprocess.run([launcher, "-n", "2"] + cli + ["--out", str(tmp_path / "r"), "--set",
                                                      'solve.preconditioner="amg"'],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2, (p.returncode, p.stderr[-1500:])
    assert "solve.preconditioner" in p.stderr and "not distributed yet" in p.stderr
    assert not (tmp_path / "r" / "result.h5").exists()


def test_bench_ranks_reports_the_halo_of_each_decomposition(tmp_path):
    """scripts/bench_ranks.py under mpiexec -n 2: the halo bytes an LBM rank sends per step (one row of 9
    populations to each neighbour) and the entries a FEM block receives per SpMV (one grid row of the
    5-point stencil from its one neighbour) are those of the decomposition; timings are reported, not tested."""
    import json

    launcher = _mpiexec()
    script = Path(__file__).parents[2] / "scripts" / "bench_ranks.py"
    p = subprocess.run([launcher, "-n", "2", sys.executable, str(script), "--lbm-sizes", "24", "--fem-sizes", "15",
                        "--steps", "4", "--iterations", "5", "--repeats", "1", "--weak", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = json.loads((tmp_path / "bench_ranks.json").read_text())["rows"]
    lbm, fem = rows
    assert lbm["ny"] == 48 and lbm["rows_per_rank"] == [24, 24]
    assert lbm["halo_bytes_sent_per_step_per_rank"] == 2 * 9 * 24 * 8
    assert fem["unknowns"] == 15 * 30 and fem["rows_per_rank"] == [225, 225]
    assert fem["halo_entries_received_per_spmv"] == [15, 15]


@pytest.mark.parametrize("command", [["compare"], ["run", "--dry-run"]])
def test_commands_other_than_run_are_refused_on_several_ranks(command, tmp_path):
    launcher = _mpiexec()
    p = subprocess.run([launcher, "-n", "2", sys.executable, "-m", "hpcsolve.cli", command[0], str(CAVITY)]
                       + command[1:] + ["--quiet"] * (command[0] == "compare"), capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert p.returncode == 2, (p.returncode, p.stderr[-1500:])
    assert "ranks" in p.stderr and "runs as one process" in p.stderr


@pytest.mark.parametrize("ny", [3, 4, 5])
def test_tiny_lattices_with_links_on_every_rank_count(ny):
    """A Bouzidi obstacle on lattices of 3 to 5 rows (periodic in y) on 1 .. ny ranks: with ny = 3 on 2 ranks
    both halos are the same row, and a link's partner must be taken from the copy next to its cell."""
    from hpcsolve.lbm.boundaries import bouzidi
    from hpcsolve.lbm.flags import WALL
    from hpcsolve.lbm.steppers.stepper import LBMSetup

    nx = 8
    flags = np.zeros((ny, nx), np.uint8)
    flags[0, 3:5] = WALL
    links = bouzidi.build_links(flags, [(flags == WALL, lambda j, i, cx, cy: np.full(j.shape, 0.25))])
    u0 = np.zeros((2, ny, nx))
    u0[0] = 0.05
    setup = LBMSetup(flags=flags, relaxation_time=0.8, links=links, initial_velocity=u0)
    ref = _reference(setup, 5).populations()
    for n in range(1, ny + 1):
        out = on_ranks(n, lambda comm: (lambda s: (s.step(5), s.populations())[1])(SlabStepper("numpy", setup, comm)))
        assert all(np.array_equal(g, ref) for g in out), (ny, n)
