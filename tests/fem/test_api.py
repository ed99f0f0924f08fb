"""``hpcsolve.fem.solve`` as an API: bad arguments are one CaseError naming the argument, the value and
what is allowed (issue 13, class 11: complex A, maxiter=True, max_outer=0, inner_rtol=nan,
true_every=-1, and every other argument of the same kinds, also from generated inputs); the matrix is
taken as given (never modified) and can be prepared once for many solves (issue 14, part 5)."""

import math

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fem_problems import poisson2d
from hpcsolve.core.errors import CaseError, HpcsolveError
from hpcsolve.fem import CGOptions, SolveReport, prepare_matrix, solve
from hpcsolve.fem.linalg import kernels_numpy_low

A9 = poisson2d(3)
B9 = np.arange(1.0, 10.0)


# ------------------------------------------------------------------------------------------ class 11
def test_the_reported_examples_are_refused_with_the_argument_named():
    for kwargs, field, shown in (
            (dict(A=A9 * (1 + 1j)), "A", "complex128"),
            (dict(maxiter=True), "maxiter", "True"),
            (dict(precision="mixed", max_outer=0), "max_outer", "0"),
            (dict(precision="mixed", method="ir-restarted", inner_rtol=float("nan")), "inner_rtol", "nan"),
            (dict(true_every=-1), "true_every", "-1")):
        A = kwargs.pop("A", A9)
        with pytest.raises(CaseError) as info:
            solve(A, B9, **kwargs)
        text = str(info.value)
        assert text.startswith(f"{field}: ") and shown in text and "allowed: " in text, text
        assert info.value.field == field


BAD = {   # argument: values that must be refused (each a CaseError naming the argument)
    "rtol": [0, 1, -1e-8, 2.0, float("nan"), float("inf"), True, "1e-8", 1e-8 + 0j, None, [1e-8]],
    "maxiter": [0, -5, True, False, 2.5, float("nan"), "100", np.float64(10.0)],
    "check_every": [0, -1, True, 1.5, 10_001, "8"],
    "true_every": [-1, True, 0.5, "20", float("inf")],
    "max_outer": [0, -3, True, 1.0, float("nan")],
    "inner_rtol": [float("nan"), 0.0, 1.0, -0.1, float("inf"), True, "1e-4"],
    "stagnation": [0.0, 1.0, float("nan"), False],
    "reliable_delta": [0.0, 1.5, float("nan"), True],
    "reliable_patience": [0, -2, True, 3.0],
    "stall_checks": [0, False, 2.5],
    "kappa_min_iterations": [0, -1, True],
    "kappa_limit": [float("nan"), -1.0, True, "inf"],
    "reliable_criterion": ["sometimes", 1, None],
    "reliable_p": ["reorth", "", 0],
    "accumulate": ["fp16", None],
    "method": ["gmres", 3, ""],
    "preconditioner": ["ilu", 1, True],
    "precision": ["fp16s", "fp128", 64],
    "x0": [np.ones(4), np.full(9, np.nan), np.ones(9) * 1j, "zeros"],
    "b": [np.ones(8), np.ones(9) * 1j, np.array(["a"] * 9), np.array([np.inf] + [1.0] * 8)],
    "bogus_option": [1],
}


@pytest.mark.parametrize("name,value", [(k, v) for k, vs in BAD.items() for v in vs],
                         ids=lambda v: repr(v)[:20])
def test_every_bad_argument_is_named(name, value):
    kwargs = {"precision": "mixed"} if name in ("max_outer", "inner_rtol", "stagnation", "reliable_delta",
                                                 "reliable_patience", "reliable_criterion", "reliable_p",
                                                 "accumulate", "kappa_limit", "kappa_min_iterations") else {}
    b = value if name == "b" else B9
    if name != "b":
        kwargs[name] = value
    with pytest.raises(CaseError) as info:
        solve(A9, b, **kwargs)
    assert info.value.field == name and str(info.value).startswith(name), str(info.value)
    assert "allowed: " in str(info.value)


@pytest.mark.parametrize("A,shown", [
    (A9.astype(np.complex128), "complex128"),
    (A9.toarray() + 0j, "complex128"),
    (sp.csr_matrix(A9, dtype=np.complex64), "complex64"),
    (np.array([["a", "b"], ["c", "d"]]), "<U1"),
    (np.ones((3, 2)), "shape (3, 2)"),
    (np.ones(4), "shape (4,)"),
    (object(), "object"),
])
def test_bad_matrices_are_named(A, shown):
    b = np.ones(A.shape[0] if hasattr(A, "shape") and len(A.shape) == 2 else 4)
    with pytest.raises(CaseError) as info:
        solve(A, b)
    assert str(info.value).startswith("A: ") and shown in str(info.value), str(info.value)


_WEIRD = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True),
                   st.complex_numbers(), st.text(max_size=5),
                   st.lists(st.integers(0, 3), max_size=3))
_ARGS = ["rtol", "maxiter", "check_every", "true_every", "max_outer", "inner_rtol", "stagnation", "reliable_delta",
         "reliable_patience", "stall_checks", "kappa_min_iterations", "kappa_limit", "reliable_criterion",
         "reliable_p", "accumulate", "method", "preconditioner"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(_ARGS), value=_WEIRD, precision=st.sampled_from(["fp64", "fp32", "mixed"]))
def test_generated_arguments_give_a_result_or_a_named_error(name, value, precision):
    """Any value of any argument: a report, or a CaseError that starts with the argument's name
    (method / precision mismatches name "method")."""
    try:
        x, rep = solve(A9, B9, precision=precision, **{name: value})
    except CaseError as exc:
        assert exc.field in (name, "method") and "allowed: " in str(exc), (name, value, str(exc))
        return
    assert isinstance(rep, SolveReport) and x.shape == (9,)
    assert rep.converged == (math.isfinite(rep.true_residual) and rep.true_residual <= rep.rtol)


def test_options_class_defaults_are_the_documented_ones():
    o = CGOptions()
    assert (o.check_every, o.reliable_p, o.reliable_criterion, o.accumulate) == (64, "correct", "vdvye", "replace")
    assert (o.inner_rtol, o.max_outer, o.stagnation, o.reliable_delta, o.reliable_patience) == (1e-4, 30, 0.9, 0.1, 8)
    assert o.kappa_limit == 2.0 ** 24 and o.stall_checks == 3


# ------------------------------------------------------------------------------------------ matrices
def test_the_callers_matrix_is_never_modified():
    """Unsorted rows with duplicates and int64 indices are converted into a new matrix."""
    data = np.array([-1.0, 1.0, 1.0, -1.0, 2.0, -1.0, 2.0, -1.0])     # [[2 -1 0] [-1 2 -1] [0 -1 2]], a_00 = 1 + 1
    indices = np.array([1, 0, 0, 2, 1, 0, 2, 1], dtype=np.int64)
    A = sp.csr_matrix((data, indices, np.array([0, 3, 6, 8], dtype=np.int64)), shape=(3, 3))
    assert not A.has_canonical_format
    before = (A.data.copy(), A.indices.copy(), A.indptr.copy())
    x, rep = solve(A, np.ones(3), rtol=1e-12)
    assert rep.converged
    np.testing.assert_allclose(A @ x, np.ones(3), rtol=1e-11)
    for got, want in zip((A.data, A.indices, A.indptr), before):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("form", ["csr", "csr_array", "coo", "csc", "dense", "int64", "float32", "int"])
def test_every_matrix_form_gives_the_same_solution(form):
    A = poisson2d(6)
    b = np.random.default_rng(2).standard_normal(36)
    M = {"csr": A, "csr_array": sp.csr_array(A), "coo": A.tocoo(), "csc": A.tocsc(), "dense": A.toarray(),
         "int64": sp.csr_matrix((A.data, A.indices.astype(np.int64), A.indptr.astype(np.int64)), shape=A.shape),
         "float32": A.astype(np.float32), "int": A.astype(np.int64)}[form]
    x, rep = solve(M, b, rtol=1e-12)
    x_ref, _ = solve(A, b, rtol=1e-12)
    assert rep.converged
    np.testing.assert_allclose(x, x_ref, rtol=0, atol=1e-12 * np.abs(x_ref).max())


def test_prepared_matrix_is_checked_once_and_reused(monkeypatch):
    calls = []
    low = kernels_numpy_low.low_ops()
    original = type(low).check_matrix

    def counting(self, *args):
        calls.append(1)
        return original(self, *args)

    monkeypatch.setattr(type(low), "check_matrix", counting)
    A = poisson2d(12)
    b = np.random.default_rng(4).standard_normal(144)
    x_host, rep_host = solve(A, b, rtol=1e-10)
    assert len(calls) == 1                      # a host matrix: checked in the call
    M = prepare_matrix(A)
    assert len(calls) == 2
    for precision, method in (("fp64", "cg"), ("fp64", "pcg-jacobi"), ("mixed", "cg-reliable"),
                              ("mixed", "ir-restarted"), ("fp32", "cg"), ("fp64", "spsolve")):
        x, rep = solve(M, b, precision=precision, method=method, rtol=1e-10)
        assert rep.backend == "numpy" and rep.setup_time_s >= 0 and rep.time_s > 0
    assert len(calls) == 2                      # never again
    x, rep = solve(M, b, rtol=1e-10)
    np.testing.assert_array_equal(x, x_host)    # the same solve, bit for bit
    assert rep.iterations == rep_host.iterations
    assert set(M.vals) == {np.dtype(np.float64), np.dtype(np.float32)}
    A.data[:] = 7.0                             # the prepared copy does not follow the caller's matrix
    x2, _ = solve(M, b, rtol=1e-10)
    np.testing.assert_array_equal(x2, x_host)


def test_setup_time_is_reported_apart_from_the_solve():
    A = poisson2d(16)
    b = np.ones(256)
    _, rep = solve(A, b)
    assert rep.setup_time_s > 0 and rep.time_s > 0
    d = rep.to_dict()
    assert {"setup_time_s", "time_s"} <= set(d)


def test_a_prepared_matrix_stays_on_its_backend():
    M = prepare_matrix(poisson2d(3))
    with pytest.raises(HpcsolveError, match="^backend: "):
        solve(M, B9, backend="numba-cuda")
    assert prepare_matrix(M) is M


def test_prepare_matrix_refuses_what_solve_refuses():
    with pytest.raises(CaseError, match="^A: CG needs a symmetric matrix"):
        prepare_matrix(np.array([[2.0, 1.0], [0.0, 2.0]]))
    with pytest.raises(CaseError, match="^A: .*complex"):
        prepare_matrix(A9 * 1j)
    with pytest.raises(CaseError, match="^A: .*non-positive diagonal"):
        prepare_matrix(sp.csr_matrix(np.array([[1.0, 0.0], [0.0, 0.0]])))
    nan = A9.copy()
    nan.data[4] = np.nan
    with pytest.raises(CaseError, match="^A: the matrix holds NaN or Inf"):
        prepare_matrix(nan)


@pytest.mark.parametrize("case", ["missing_partner", "tiny_asymmetry", "explicit_zero"])
def test_symmetry_check_is_exact(case):
    """max |a_ij - a_ji| over stored entries (a missing partner counts as 0), against 1e-10 max |A|."""
    A = poisson2d(5).tolil()
    if case == "missing_partner":
        A[0, 24] = 1e-9                        # above 1e-10 * 4
    elif case == "tiny_asymmetry":
        A[3, 4] = -1.0 + 3e-10                 # 3e-10 <= 1e-10 * 4: accepted as symmetric
    A = sp.csr_matrix(A)
    if case == "explicit_zero":                # a stored 0 without a stored partner is symmetric
        coo = A.tocoo()
        A = sp.coo_matrix((np.r_[coo.data, 0.0], (np.r_[coo.row, 0], np.r_[coo.col, 24])), shape=A.shape).tocsr()
        assert A.nnz == coo.nnz + 1
    if case == "missing_partner":
        with pytest.raises(CaseError, match=r"^A: CG needs a symmetric matrix \(got 'max \|A - A\^T\| = 1.000e-09'"):
            solve(A, np.ones(25))
    else:
        _, rep = solve(A, np.ones(25), rtol=1e-10)
        assert rep.converged
