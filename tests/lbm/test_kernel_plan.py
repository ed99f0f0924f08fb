"""CPU checks of the kernel plan (hpcsolve/lbm/kernels/kernel_plan.py): the position expressions both emitters write
into the step kernels, evaluated here with NumPy on every cell of a small periodic grid, stream as the
reference does (``np.roll`` of f*_i by c_i), agree with the in-place layouts of hpcsolve/lbm/steppers/inplace.py, and
the boundary rule of each layout reads f*_opp(i)(x) of the state it starts from. The kernels built from the
plan are checked against the NumPy reference under the CUDA simulator (test_cudasim_lbm.py) and on the GPU
(test_gpu_lbm.py)."""

import numpy as np
import pytest

from hpcsolve.lbm.steppers import inplace
from hpcsolve.lbm.kernels import kernel_plan
from hpcsolve.lbm import lattice
from hpcsolve.lbm.boundaries import link_rules
from hpcsolve.lbm.flags import OUTLET, VELOCITY, WALL

Q, CX, CY, OPP = lattice.Q, lattice.CX, lattice.CY, lattice.OPPOSITE
SHAPE = (5, 7)


def _locals(shape, i=None):
    """The kernels' locals (kernel_plan's docstring) for every cell, as int64 arrays; with ``i``, those of the
    generic link of direction i (``s`` = x - c_i, ``i`` / ``opp``)."""
    ny, nx = shape
    y, x = np.divmod(np.arange(ny * nx, dtype=np.int64), nx)
    env = {"N": ny * nx, "x": x, "xm": (x - 1) % nx, "xp": (x + 1) % nx,
           "row": y * nx, "rowm": ((y - 1) % ny) * nx, "rowp": ((y + 1) % ny) * nx, "cell": y * nx + x}
    if i is not None:
        env.update(i=i, opp=OPP[i], s=((y - CY[i]) % ny) * nx + (x - CX[i]) % nx)
    return env


def _at(expr: str, shape, i=None) -> np.ndarray:
    """A position expression of the plan evaluated for every cell (it is Python as much as C)."""
    return np.broadcast_to(eval(expr, {}, _locals(shape, i)), (shape[0] * shape[1],))


def _stored(state, g):
    """The flat array that holds the even-layout state ``g`` (9, ny, nx) in ``state``'s layout."""
    n = g[0].size
    pos = np.arange(Q * n)
    out = np.empty(Q * n)
    out[inplace.odd_positions(pos, g.shape[1:]) if state.shifted else pos] = g.reshape(-1)
    return out


def _streamed(g):
    """The reference's streaming: f_i(x) = f*_i(x - c_i) (periodic)."""
    return np.stack([np.roll(g[i], shift=(CY[i], CX[i]), axis=(0, 1)) for i in range(Q)])


@pytest.mark.parametrize("state", [kernel_plan.EVEN, kernel_plan.ODD], ids=lambda s: s.name)
def test_state_positions_are_those_of_inplace(state):
    """own(i) of every cell is where inplace.py puts f*_i(x): slot i of x, or slot opp(i) of x + c_i."""
    n = SHAPE[0] * SHAPE[1]
    for i in range(Q):
        even = i * n + np.arange(n)
        want = inplace.odd_positions(even, SHAPE) if state.shifted else even
        assert np.array_equal(_at(state.own(i), SHAPE), want)


@pytest.mark.parametrize("layout", [kernel_plan.TWO_BUFFER, kernel_plan.AA_EVEN, kernel_plan.AA_ODD],
                         ids=lambda s: s.name)
def test_each_step_layout_streams_as_the_reference(layout):
    """A step with the identity collision: pull (unrolled ``interior`` and generic ``pull``) then store gives
    the reference's streamed state in the layout the step writes; the boundary rule's ``hop`` is f*_opp(i)(x)."""
    rng = np.random.default_rng(3)
    g = rng.standard_normal((Q,) + SHAPE)
    A = _stored(layout.reads, g)
    want = _streamed(g).reshape(Q, -1)
    for i in range(Q):
        assert np.array_equal(A[_at(layout.interior(i), SHAPE)], want[i])
        if i:
            assert np.array_equal(A[_at(layout.pull("i"), SHAPE, i)], want[i])
            assert np.array_equal(A[_at(layout.hop("i"), SHAPE, i)], g.reshape(Q, -1)[OPP[i]])
            assert np.array_equal(A[_at(layout.pull(i), SHAPE, i)], want[i])      # unrolled, with s = x - c_i
    out = np.full(Q * SHAPE[0] * SHAPE[1], np.nan)
    for j in range(Q):
        out[_at(layout.store(j), SHAPE)] = want[j]
    assert not np.isnan(out).any()                           # every slot written once
    assert np.array_equal(out, _stored(layout.writes, want.reshape((Q,) + SHAPE)))


def test_aa_pair_returns_to_the_even_layout_and_its_stores_hit_only_slots_it_read():
    """AA even then odd is two streaming steps ending in the even layout; each in-place step writes exactly the
    slots it reads (no thread writes a slot another one still needs)."""
    n = SHAPE[0] * SHAPE[1]
    for layout in kernel_plan.step_layouts(True):
        reads = np.sort(np.concatenate([_at(layout.interior(i), SHAPE) for i in range(Q)]))
        writes = np.sort(np.concatenate([_at(layout.store(j), SHAPE) for j in range(Q)]))
        assert np.array_equal(reads, writes) and np.array_equal(reads, np.arange(Q * n))
    even, odd = kernel_plan.step_layouts(True)
    assert even.writes == odd.reads and odd.writes == even.reads == kernel_plan.EVEN
    assert kernel_plan.step_layouts(False) == (kernel_plan.TWO_BUFFER,)


def test_link_rules_cover_the_boundary_flags_once_and_name_their_value():
    """The step kernels test the rules' flags in order and leave the outlet as what remains; every piece ends
    in the value ``h``; only the characteristic outlet looks up a reference outflow."""
    for characteristic in (False, True):
        rules = link_rules(characteristic)
        assert [r.flag for r in rules] == [WALL, VELOCITY, OUTLET]
        for rule in rules:
            assert "h" in rule.piece[-1].out
        types = {type(op) for op in rules[-1].piece}
        assert (kernel_plan.Lookup in types) == characteristic and kernel_plan.OwnVelocity in types


def test_generic_position_of_a_neighbour_cell_is_refused():
    """x + c_i is no local of the generic link function: asking for it is an error, not wrong code."""
    with pytest.raises(ValueError, match="not a kernel local"):
        kernel_plan.ODD.position(1, 0, "i")


def test_pair_pulls_give_each_cell_of_a_pair_its_streamed_population():
    """The 16-bit pair kernel's plan (``PAIR_PULLS``): from the pair's own word and the neighbouring pair's word
    of the row of y - c_y (periodic), cells x and x + 1 get the reference's streamed f_i."""
    ny, nx = 4, 8
    rng = np.random.default_rng(5)
    g = rng.standard_normal((Q, ny, nx))
    want = _streamed(g)
    words = g.reshape(Q, ny, nx // 2, 2)             # [i, y, pair, (lo, hi)]: the even cell in the low half
    rows = {"prow": 0, "prowm": -1, "prowp": 1}       # the row of y - c_y, as y + offset
    for i, pull in enumerate(kernel_plan.PAIR_PULLS):
        assert rows[pull.row] == -CY[i] and pull.neighbour == -CX[i]
        for y in range(ny):
            for p in range(nx // 2):
                word = {"own": words[i, (y + rows[pull.row]) % ny, p],
                        "nb": words[i, (y + rows[pull.row]) % ny, (p + pull.neighbour) % (nx // 2)]}
                got = [word[w][0 if half == "lo" else 1] for w, half in (pull.a, pull.b)]
                assert got == [want[i, y, 2 * p], want[i, y, 2 * p + 1]]
        assert ("nb" in (pull.a[0], pull.b[0])) == bool(pull.neighbour)


def test_moments_kernel_declares_coordinates_only_where_positions_use_them():
    """The even layout's positions are ``i * N + cell``: its moments kernel declares no coordinates (NVRTC warning
    177); the odd layout's use every row and column."""
    from hpcsolve.lbm.kernels import step_plan

    coords = {"y", "x", "row", "rowm", "rowp", "xm", "xp"}
    for state, want in ((kernel_plan.EVEN, set()), (kernel_plan.ODD, coords)):
        names = {s.name for s in step_plan.moments_kernel(state).body if isinstance(s, kernel_plan.Let)}
        assert names & coords == want


def test_both_printers_write_one_description():
    """One body in the plan's vocabulary, printed as CUDA C (a loop, casts, ``?:``) and as Python (the loop unrolled,
    ``name[k]`` one local per iteration, device arrays through ``load_at``)."""
    from hpcsolve.core.precision import FP32
    from hpcsolve.lbm.kernels import kernel_plan as kp
    from hpcsolve.lbm.kernels.population_code import cuda_code, numba_code
    from hpcsolve.lbm.kernels.print_cuda import CPrinter
    from hpcsolve.lbm.kernels.print_numba import PythonPrinter

    body = (kp.Decl("int", "code", (2,)),
            kp.Unrolled("k", 2, (kp.Let("x", "int", "x0 + k * 64"),
                                 kp.Set("code[k]", kp.Sel("x < nx", kp.Cast("int", kp.At("flags", "row + x")), "1")))),
            kp.If("x == 0", (kp.Return(),), compact=True))
    c = " ".join(" ".join(CPrinter(None, cuda_code(FP32)).block(body, 0)).split())
    assert c == ("int code[2]; #pragma unroll for (int k = 0; k < 2; ++k) { const int x = x0 + k * 64; "
                 "code[k] = (x < nx) ? (int)flags[row + x] : 1; } if (x == 0) return;")
    py = PythonPrinter(numba_code(FP32)).block(body, 0)
    assert py == ["x = x0 + 0 * 64", "code_0 = load_at(flags, row + x) if x < nx else 1",
                  "x = x0 + 1 * 64", "code_1 = load_at(flags, row + x) if x < nx else 1",
                  "if x == 0:", "    return"]
