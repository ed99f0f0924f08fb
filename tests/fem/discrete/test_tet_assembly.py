"""Two-phase P1 tetrahedral assembly (hpcsolve.fem.discrete.tet_assembly): the pattern is SciPy's, with sorted
columns and the cells' positions pointing at their entries; the numeric phase equals the element-generic stiffness
summed by SciPy (``fe_assembly.stiffness``) on a box and a perturbed box, with a number or a per-cell coefficient;
the device kernel's CUDA C compiles (NVRTC, where it loads) and, built for the host with shims for the few CUDA
names it uses (g++, where present), gives the same numbers from the arguments the CuPy launch passes; the bytes
model counts what its docstring says."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from cuda_compile_util import TARGETS, compile_cuda, nvrtc_problem
from hpcsolve.fem.discrete import fe_assembly as fa
from hpcsolve.fem.discrete import tet_assembly as ta
from hpcsolve.fem.discrete.elements import element
from hpcsolve.fem.discrete.simplex_gen import box, dofmap


def jiggled(nx: int, ny: int, nz: int, seed: int = 3, amount: float = 0.2):
    """box(nx, ny, nz) with its interior vertices moved at random by up to ``amount`` cells."""
    sm = box(nx, ny, nz)
    inner = np.all((sm.points > 1e-12) & (sm.points < 1 - 1e-12), axis=1)
    sm.points = sm.points.copy()
    sm.points[inner] += amount / max(nx, ny, nz) * np.random.default_rng(seed).uniform(-1, 1, (int(inner.sum()), 3))
    return sm


def scipy_stiffness(sm, coefficient):
    A = fa.stiffness(sm, dofmap(sm, 1), element(3, 1), coefficient)
    A.sort_indices()
    return A


MESHES = {"box": lambda: box(4, 3, 5), "jiggled": lambda: jiggled(5, 4, 4)}


@pytest.mark.parametrize("name", sorted(MESHES))
def test_the_pattern_is_scipys_and_the_positions_point_at_the_cells_entries(name):
    sm = MESHES[name]()
    pat = ta.pattern(sm.cells, sm.n_points)
    A = scipy_stiffness(sm, 1.0)
    assert pat.indptr.dtype == np.int32 and pat.indices.dtype == np.int32 and pat.positions.dtype == np.int32
    assert np.array_equal(pat.indptr, A.indptr) and np.array_equal(pat.indices, A.indices)
    assert pat.nnz == A.nnz and pat.positions.shape == (sm.n_cells, 4, 4)
    rows = np.repeat(np.arange(sm.n_points), np.diff(pat.indptr))
    for r in range(sm.n_points):                             # sorted, unique columns, the diagonal stored
        cols = pat.indices[pat.indptr[r]:pat.indptr[r + 1]]
        assert np.all(np.diff(cols) > 0) and r in cols
    assert np.array_equal(rows[pat.positions], np.broadcast_to(sm.cells[:, :, None], (sm.n_cells, 4, 4)))
    assert np.array_equal(pat.indices[pat.positions], np.broadcast_to(sm.cells[:, None, :], (sm.n_cells, 4, 4)))


def test_a_node_no_cell_uses_keeps_its_diagonal():
    cells = np.array([[0, 1, 2, 4]], dtype=np.int32)
    pat = ta.pattern(cells, 6)
    assert np.diff(pat.indptr).tolist() == [4, 4, 4, 1, 4, 1]
    assert pat.indices[pat.indptr[3]] == 3 and pat.indices[pat.indptr[5]] == 5


@pytest.mark.parametrize("name", sorted(MESHES))
@pytest.mark.parametrize("per_cell", [False, True])
def test_the_numeric_phase_equals_the_summed_element_matrices(name, per_cell):
    sm = MESHES[name]()
    k = np.random.default_rng(7).uniform(0.5, 4.0, sm.n_cells) if per_cell else 2.5
    A = scipy_stiffness(sm, k)
    pat = ta.pattern(sm.cells, sm.n_points)
    data = ta.stiffness_values(sm.points, sm.cells, pat.positions, pat.nnz, k)
    assert data.dtype == np.float64 and data.shape == (pat.nnz,)
    assert np.abs(data - A.data).max() <= 1e-12 * np.abs(A.data).max()
    row_sums = np.add.reduceat(data, pat.indptr[:-1])
    assert np.abs(row_sums).max() <= 1e-12 * np.abs(A.data).max()       # constants in the null space


def test_a_coefficient_of_the_wrong_length_is_refused():
    sm = box(2, 2, 2)
    pat = ta.pattern(sm.cells, sm.n_points)
    with pytest.raises(ValueError, match="one value per cell"):
        ta.stiffness_values(sm.points, sm.cells, pat.positions, pat.nnz, np.ones(sm.n_cells + 1))


def test_bytes_moved_counts_inputs_once_and_data_read_and_written():
    n, m, nnz = 1000, 4000, 15000
    assert ta.bytes_moved(n, m, nnz) == m * 16 + n * 24 + m * 64 + nnz * 16
    assert ta.bytes_moved(n, m, nnz, per_cell_coefficient=True) == ta.bytes_moved(n, m, nnz) + 8 * m
    assert ta.bytes_moved(n, m, nnz, position_bytes=8) == ta.bytes_moved(n, m, nnz) + m * 64
    assert ta.bytes_moved(n, m, 2**31) - ta.bytes_moved(n, m, 2**31 - 1) == m * 64 + 16


@pytest.mark.skipif(nvrtc_problem() is not None, reason=str(nvrtc_problem()))
@pytest.mark.parametrize("arch", TARGETS)
@pytest.mark.parametrize("pos_dtype", [np.int32, np.int64])
def test_the_kernel_compiles_and_takes_what_the_launch_passes(arch, pos_dtype):
    """NVRTC makes a CUBIN of the kernel as CuPy would (no options of its own) with 7 parameters of 64 bits, as
    many as the launch passes (6 pointers and 2 long long where the launch has 5 arrays and 2 int64 scalars)."""
    out = compile_cuda(ta.source(pos_dtype), (), arch)
    assert out.ok, out.log
    assert out.entries() == ["p1_tet_stiffness"] and out.cubin
    sm = box(1, 1, 1)
    _, _, args = ta.launch_arguments(np, sm.points, sm.cells, np.zeros((6, 4, 4), dtype=pos_dtype), 8)
    assert out.params()["p1_tet_stiffness"] == ["u64"] * len(args)
    assert [np.dtype(a.dtype) for a in args] == [np.float64, np.int32, np.dtype(pos_dtype), np.float64,
                                                 np.int64, np.int64, np.float64]


#: the CUDA names the kernel uses, for a host build: one thread at a time, atomicAdd a plain add
HOST_SHIMS = r"""
#include <math.h>
struct index3 { unsigned int x; };
static index3 blockIdx, blockDim, threadIdx;
#define __global__
static inline double atomicAdd(double* p, double v) { double old = *p; *p += v; return old; }
"""
HOST_LAUNCH = r"""
extern "C" void launch(long long blocks, long long threads, const double* points, const int* cells,
                       const pos_t* positions, const double* coef, long long stride, long long m, double* data)
{
    blockDim.x = (unsigned int)threads;
    for (long long b = 0; b < blocks; ++b)
        for (long long t = 0; t < threads; ++t) {
            blockIdx.x = (unsigned int)b;
            threadIdx.x = (unsigned int)t;
            p1_tet_stiffness(points, cells, positions, coef, stride, m, data);
        }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ to build the kernel for the host")
@pytest.mark.parametrize("pos_dtype", [np.int32, np.int64])
def test_the_kernel_built_for_the_host_gives_the_numpy_values(tmp_path, pos_dtype):
    """The kernel's own text, compiled by g++ with HOST_SHIMS and run thread by thread over the grid of the CuPy
    launch, on the arguments ``launch_arguments`` makes (a jiggled box whose cell count is no multiple of the
    block: the guard on e >= m is exercised), equals ``by_arrays`` to round-off; per-cell and one coefficient."""
    src = tmp_path / "kernel.cpp"
    src.write_text(HOST_SHIMS + ta.source(pos_dtype) + HOST_LAUNCH)
    lib = tmp_path / "kernel.so"
    subprocess.run(["g++", "-O1", "-shared", "-fPIC", "-Wno-unknown-pragmas", "-o", str(lib), str(src)], check=True)
    fn = ctypes.CDLL(str(lib)).launch
    fn.restype = None
    sm = jiggled(5, 3, 4)
    assert sm.n_cells % ta.THREADS
    pat = ta.pattern(sm.cells, sm.n_points)
    positions = pat.positions.astype(pos_dtype)
    for k in (1.7, np.random.default_rng(2).uniform(0.5, 4.0, sm.n_cells)):
        grid, block, args = ta.launch_arguments(np, sm.points, sm.cells, positions, pat.nnz, k)
        conv = [a.ctypes.data_as(ctypes.c_void_p) if isinstance(a, np.ndarray) else ctypes.c_longlong(int(a))
                for a in args]
        fn(ctypes.c_longlong(grid[0]), ctypes.c_longlong(block[0]), *conv)
        want = ta.by_arrays(sm.points, sm.cells, positions, pat.nnz, k)
        assert np.abs(args[-1] - want).max() <= 1e-13 * np.abs(want).max()
