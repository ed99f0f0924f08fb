"""Smoothed aggregation set up with array-module-generic sparse code: the same functions run with
``xp, sparse = numpy, scipy.sparse`` (CI, the CPU) and ``cupy, cupyx.scipy.sparse`` (the GPU, the whole set-up on
the device; only the coarsest level's dense inverse is formed on the host).

The steps of one level (Bell, Dalton, Olson 2012, "Exposing fine-grained parallelism in algebraic multigrid
methods"), every one a vector operation, a sparse matrix-vector product or a sparse matrix product:

- strength of connection: the symmetric rule |a_ij| >= theta sqrt(|a_ii a_jj|) (theta 0: every off-diagonal
  nonzero), on the nodes of the level (a coarse level with k candidates has k unknowns per node: its blocks are
  amalgamated by their Frobenius norms first);
- MIS(2) aggregation: pseudo-random distinct priorities (:func:`hashed_indices`, made on the device), each node's (state, priority) key maxed twice over its
  strong neighbours (the distance-2 maximum) per round; an undecided node that is its own distance-2 maximum
  joins the independent set, one with a set member within distance 2 leaves. The members are the roots; every
  other node joins the aggregate of a root within distance 1, else within distance 2 (two more max steps). Nodes
  without a strong connection stay unaggregated (as in pyamg: a zero row of the tentative prolongator);
- the tentative prolongator from the near-null space B: a QR factorization of each aggregate's rows of B by
  modified Gram-Schmidt vectorized over all aggregates (segment sums are a product with the aggregation matrix),
  a column whose norm falls below ``QR_RTOL`` of its start is dropped (zero), the coarse B is R;
- on the finest level only, B is first smoothed by ``IMPROVE_STEPS`` weighted Jacobi steps (pyamg does 4 symmetric
  Gauss-Seidel sweeps, which are sequential);
- P = (I - omega / rho D^-1 A) T, rho(D^-1 A) by 20 Lanczos steps on D^-1/2 A D^-1/2 (:func:`rho_dinv_a_xp`), the
  Galerkin product A_c = P^T (A P) by two sparse matrix products (cuSPARSE SpGEMM through cupyx on the GPU).

:func:`sa_levels_xp` returns the levels and an :class:`SAStructure` (the aggregates of every level): with it a
matrix with the same sparsity and new values is set up again without strength or aggregation
(``structure=``), the numeric part only. :class:`DeviceSABuilder` is the hierarchy builder on top: it keeps the
structure on the prepared matrix, so that a values-only update of it is set up numerically.

The one step with no array-module spelling is the row maximum over a CSR graph (a max-semiring SpMV): NumPy's
``maximum.reduceat`` on the host, one small RawKernel with CuPy (:func:`_row_max`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hpcsolve.fem.linalg.precond.hierarchy import Hierarchy, HierarchyBuilder
from hpcsolve.fem.linalg.precond.layout import canonical
from hpcsolve.fem.linalg.precond.mg_options import DENSE_COARSENING, SLOW_COARSENING

SA_OMEGA = 4.0 / 3.0
LANCZOS_STEPS = 20
IMPROVE_STEPS = 4          # Jacobi steps smoothing the finest level's near-null space
QR_RTOL = 1e-10            # a candidate whose norm in an aggregate falls below this of its start: dropped there
MIS_MAX_ROUNDS = 64        # rounds of the MIS(2) (each decides at least the largest undecided key: O(log n) seen)
#: the second pass of the aggregation (one candidate per node only): a node left after the roots' neighbours joined
#: may become a root when at least this many of its strong neighbours are left too (a prototype on the CPU, 512^2,
#: iterations to 1e-8 against pyamg's hierarchy: 1 / 3 / 4 / 5 gave anisotropic 0.99 / 1.01 / 1.04 / 1.10 at operator
#: complexity 1.39 / 1.31 / 1.26 / 1.22; without the pass 1.44 at 1.17; docs/design/fem_multigrid.md)
SECOND_PASS_DEGREE = 4
SEED = 0


@dataclass
class SAStructure:
    """What a values-only update keeps: each level's aggregate of every unknown (-1: unaggregated), the number of
    aggregates, the unknowns per node of the aggregation graph, and the rows of every level."""

    aggregates: list = field(default_factory=list)
    counts: list = field(default_factory=list)
    blocks: list = field(default_factory=list)
    rows: list = field(default_factory=list)


# --------------------------------------------------------------------------- row maximum over a CSR graph
_ROW_MAX_SRC = r"""
extern "C" __global__ void row_max(const int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                                   const long long* __restrict__ key, long long* __restrict__ out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long m = key[i];
    for (int k = indptr[i]; k < indptr[i + 1]; ++k) { long long v = key[indices[k]]; m = v > m ? v : m; }
    out[i] = m;
}
"""
_ROW_MAX_EDGES_SRC = r"""
extern "C" __global__ void row_max_edges(const int n, const int* __restrict__ indptr,
                                         const long long* __restrict__ ekey, const long long* __restrict__ init,
                                         long long* __restrict__ out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long m = init[i];
    for (int k = indptr[i]; k < indptr[i + 1]; ++k) { long long v = ekey[k]; m = v > m ? v : m; }
    out[i] = m;
}
"""
#: one MIS(2) round in two launches on the GPU (the array code of ``_mis2_roots`` is about 17 launches a round): the
#: masked distance-1 maximum of the (state, priority) keys, then the distance-2 maximum and the state update, with a
#: flag raised while a node is undecided
_MIS_ROUND_SRC = r"""
__device__ __forceinline__ long long mis_key(const long long* state, const long long* prio, const bool* cand, int j) {
    return cand[j] ? ((state[j] << 32) | prio[j]) : -1LL;
}
extern "C" __global__ void mis_m1(const int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                                  const long long* __restrict__ state, const long long* __restrict__ prio,
                                  const bool* __restrict__ cand, const bool* __restrict__ passable,
                                  long long* __restrict__ m1) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (!passable[i]) { m1[i] = -1LL; return; }
    long long m = mis_key(state, prio, cand, i);
    for (int k = indptr[i]; k < indptr[i + 1]; ++k) { long long v = mis_key(state, prio, cand, indices[k]); m = v > m ? v : m; }
    m1[i] = m;
}
extern "C" __global__ void mis_update(const int n, const int* __restrict__ indptr, const int* __restrict__ indices,
                                      const long long* __restrict__ m1, const long long* __restrict__ state,
                                      const long long* __restrict__ prio, long long* __restrict__ out,
                                      int* __restrict__ undecided) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long s = state[i];
    if (s != 1) { out[i] = s; return; }
    long long key = (s << 32) | prio[i];
    long long m = m1[i];
    for (int k = indptr[i]; k < indptr[i + 1]; ++k) { long long v = m1[indices[k]]; m = v > m ? v : m; }
    long long t = m == key ? 2 : ((m >> 32) == 2 ? 0 : 1);
    out[i] = t;
    if (t == 1) undecided[0] = 1;
}
"""
_KERNELS: dict = {}


def _row_max(xp, indptr, indices, key):
    """out_i = max(key_i, max over the graph's row i of key_j) (int64 keys; rows may be empty)."""
    if xp is np:            # the neighbours' keys gathered per edge (on the GPU one kernel reads them in place)
        return _row_max_edges(xp, indptr, key[indices], key)
    return _launch(xp, "row_max", _ROW_MAX_SRC, key, indptr, indices, key)


def _row_max_edges(xp, indptr, ekey, init):
    """out_i = max(init_i, max over the stored entries k of row i of ekey_k) (int64; a key per edge)."""
    if xp is np:
        out = init.copy()
        rows = np.flatnonzero(np.diff(indptr))
        if rows.size:
            out[rows] = np.maximum(out[rows], np.maximum.reduceat(ekey, indptr[:-1][rows]))
        return out
    return _launch(xp, "row_max_edges", _ROW_MAX_EDGES_SRC, init, indptr, ekey, init)


def _launch(xp, name: str, source: str, like, *args):
    """One thread per row: the RawKernel ``name`` of ``source`` (compiled once) with (n, *args, out)."""
    kern = _KERNELS.get(name)
    if kern is None:
        kern = _KERNELS[name] = xp.RawKernel(source, name)
    n = like.shape[0]
    out = xp.empty_like(like)
    threads = 256
    kern(((n + threads - 1) // threads,), (threads,), (np.int32(n), *args, out))
    return out


# --------------------------------------------------------------------------- pseudo-random numbers on the device
def hashed_indices(n: int, xp, seed: int = SEED):
    """uint32 h(i) for i < n: the seeded index through murmur3's 32-bit finalizer, a bijection of the 32-bit
    integers, so the values are distinct (n <= 2^32) and well mixed. The same bits with NumPy and CuPy, made
    where the arrays live (a host permutation of 16.8 M priorities took a large share of the set-up)."""
    x = xp.arange(n, dtype=xp.uint32) ^ xp.uint32((seed * 0x9E3779B9) & 0xFFFFFFFF)
    x ^= x >> xp.uint32(16)
    x *= xp.uint32(0x85EBCA6B)
    x ^= x >> xp.uint32(13)
    x *= xp.uint32(0xC2B2AE35)
    x ^= x >> xp.uint32(16)
    return x


# --------------------------------------------------------------------------- strength, aggregation
def entry_rows(M, xp):
    """The row of every stored entry of CSR M (int32)."""
    return M.tocoo().row.astype(xp.int32)


def node_graph(A, block: int, xp, sparse):
    """The matrix whose strength graph is aggregated: A itself (block 1), or its k x k blocks amalgamated by their
    Frobenius norms (a coarse level with k candidates per node), as CSR."""
    if block == 1:
        return A
    coo = A.tocoo()
    nn = A.shape[0] // block
    N = sparse.coo_matrix(((coo.data * coo.data).astype(xp.float64), (coo.row // block, coo.col // block)),
                          shape=(nn, nn)).tocsr()
    N.sum_duplicates()
    return sparse.csr_matrix((xp.sqrt(N.data), N.indices, N.indptr), shape=N.shape)


def strength_graph(A, theta: float, xp, with_strength: bool = False):
    """(indptr, indices) int32 of the strong connections of square CSR A (no diagonal): i ~ j where
    |a_ij| >= theta sqrt(|a_ii a_jj|) and a_ij != 0, rows in A's order; ``with_strength``: and each kept edge's
    strength |a_ij| / sqrt(|a_ii a_jj|) (float64), which the last join of the aggregation ranks by."""
    n = A.shape[0]
    rows = entry_rows(A, xp)
    cols = A.indices.astype(xp.int32)
    d = xp.abs(A.diagonal())
    a = xp.abs(A.data)
    scale = xp.sqrt(d[rows] * d[cols])
    keep = (rows != cols) & (a > 0) & (a >= theta * scale)
    counts = xp.bincount(rows[keep], minlength=n)
    indptr = xp.zeros(n + 1, dtype=xp.int32)
    indptr[1:] = xp.cumsum(counts).astype(xp.int32)
    if not with_strength:
        return indptr, cols[keep]
    return indptr, cols[keep], a[keep] / xp.where(scale[keep] > 0, scale[keep], 1.0)


def _mis2_roots(indptr, indices, candidate, passable, prio, xp):
    """The roots of an MIS(2) among the ``candidate`` nodes, distances measured along paths through ``passable``
    nodes (a superset): each round an undecided candidate that is its own distance-2 maximum of (state,
    priority) joins, one with a root within distance 2 leaves."""
    state = xp.where(candidate, 1, 0).astype(xp.int64)       # 0 out, 1 undecided, 2 root
    if xp is not np:
        return _mis2_roots_gpu(indptr, indices, candidate, passable, prio, xp, state)
    for _ in range(MIS_MAX_ROUNDS):
        key = xp.where(candidate, (state << 32) | prio, -1)
        m1 = xp.where(passable, _row_max(xp, indptr, indices, key), -1)
        m2 = _row_max(xp, indptr, indices, m1)
        undecided = state == 1
        state = xp.where(undecided & (m2 == key), 2, xp.where(undecided & ((m2 >> 32) == 2), 0, state))
        if not bool((state == 1).any()):
            return state == 2
    raise RuntimeError("MIS(2) aggregation did not finish")    # pragma: no cover - a round decides the largest key


def _mis2_roots_gpu(indptr, indices, candidate, passable, prio, xp, state):
    """``_mis2_roots`` with CuPy: the same rounds in two RawKernel launches each (``_MIS_ROUND_SRC``), the same
    integers (the GPU tests compare the aggregates with the NumPy path's). The kernels take the arrays as they are:
    int32 ``indptr``/``indices`` (``strength_graph``), int64 ``prio``/``state``, bool masks, and ``candidate`` a
    subset of ``passable`` (as in ``_mis2_roots``, which does not finish otherwise)."""
    if "mis_m1" not in _KERNELS:
        module = xp.RawModule(code=_MIS_ROUND_SRC)
        _KERNELS["mis_m1"], _KERNELS["mis_update"] = module.get_function("mis_m1"), module.get_function("mis_update")
    m1_kernel, update = _KERNELS["mis_m1"], _KERNELS["mis_update"]
    n = state.shape[0]
    cand, passable = xp.ascontiguousarray(candidate), xp.ascontiguousarray(passable)
    m1, nxt, flag = xp.empty_like(state), xp.empty_like(state), xp.zeros(1, dtype=xp.int32)
    grid, block, n32 = ((n + 255) // 256,), (256,), np.int32(n)
    for _ in range(MIS_MAX_ROUNDS):
        m1_kernel(grid, block, (n32, indptr, indices, state, prio, cand, passable, m1))
        flag.fill(0)
        update(grid, block, (n32, indptr, indices, m1, state, prio, nxt, flag))
        state, nxt = nxt, state
        if not int(flag.get()[0]):
            return state == 2
    raise RuntimeError("MIS(2) aggregation did not finish")    # pragma: no cover - as in _mis2_roots


def mis2_aggregate(indptr, indices, xp, seed: int = SEED, strength=None, second_pass: bool = False):
    """(aggregate of every node, -1 for nodes without a strong connection; the number of aggregates) by MIS(2)
    (see the module docstring). Deterministic for a seed.

    ``second_pass`` (needs ``strength``, the edges' strengths): after the roots' neighbours have joined, the nodes
    left that have at least SECOND_PASS_DEGREE strong neighbours also left choose roots by an MIS(2) among
    themselves (paths through the nodes left) and their left neighbours join them; every node still left joins the
    aggregate of its most strongly connected aggregated neighbour. Without it a node left joins the aggregate of a
    root within distance 2 (the neighbour's aggregate of largest number, or the strongest given ``strength``)."""
    n = indptr.shape[0] - 1
    connected = xp.diff(indptr) > 0
    prio = hashed_indices(n, xp, seed).astype(xp.int64)
    root = _mis2_roots(indptr, indices, connected, connected, prio, xp)
    count = int(root.sum())
    ids = (xp.cumsum(root) - 1).astype(xp.int64)
    agg = _row_max(xp, indptr, indices, xp.where(root, ids, -1))          # the one root within distance 1
    if strength is None:
        agg = xp.where(agg >= 0, agg, _row_max(xp, indptr, indices, agg))   # else one within distance 2
        return xp.where(connected, agg, -1), count
    if second_pass:
        left = connected & (agg < 0)
        at = xp.concatenate([xp.zeros(1, dtype=xp.int64), xp.cumsum(left[indices].astype(xp.int64))])
        degree = at[indptr[1:]] - at[indptr[:-1]]                         # strong neighbours also left
        root2 = _mis2_roots(indptr, indices, left & (degree >= SECOND_PASS_DEGREE), left, prio, xp)
        ids2 = (count + xp.cumsum(root2) - 1).astype(xp.int64)
        near = _row_max(xp, indptr, indices, xp.where(root2, ids2, -1))
        agg = xp.where(left & (near >= 0), near, agg)
        count += int(root2.sum())
    # the rest: the aggregate of the most strongly connected aggregated neighbour (each such node has one: every
    # connected node is within distance 2 of a first-pass root)
    q = xp.minimum((strength * (1 << 30)).astype(xp.int64), (1 << 30) - 1) << 32
    for _ in range(2):
        left = connected & (agg < 0)
        if not bool(left.any()):
            break
        nb = agg[indices]
        best = _row_max_edges(xp, indptr, xp.where(nb >= 0, q | nb, -1), xp.full(n, -1, dtype=xp.int64))
        agg = xp.where(left & (best >= 0), best & 0xFFFFFFFF, agg)
    return xp.where(connected, agg, -1), count


# --------------------------------------------------------------------------- tentative prolongator
def tentative(agg, count: int, B, xp, sparse):
    """(T, B_c): the tentative prolongator (n x count k, orthonormal columns per aggregate) and the coarse near-null
    space (count k x k), by a QR factorization of every aggregate's rows of B (modified Gram-Schmidt, vectorized
    over the aggregates)."""
    n, k = B.shape
    inside = agg >= 0
    a = xp.where(inside, agg, 0)
    members = xp.flatnonzero(inside)
    S = sparse.coo_matrix((xp.ones(members.shape[0]), (a[members], members)), shape=(count, n)).tocsr()   # segment sums
    Q = xp.zeros((n, k))
    R = xp.zeros((count, k, k))
    for j in range(k):
        v = xp.where(inside, B[:, j], 0.0)
        start = xp.sqrt(S @ (v * v))
        for l in range(j):
            r = S @ (Q[:, l] * v)
            v = v - Q[:, l] * r[a]
            R[:, l, j] = r
        norm = xp.sqrt(S @ (v * v))
        ok = norm > QR_RTOL * start
        norm = xp.where(ok, norm, 0.0)
        R[:, j, j] = norm
        Q[:, j] = xp.where(inside & ok[a], v / xp.where(ok, norm, 1.0)[a], 0.0)
    nin = members.shape[0]
    indptr = xp.zeros(n + 1, dtype=xp.int32)
    indptr[1:] = xp.cumsum(inside.astype(xp.int32) * k).astype(xp.int32)
    cols = (a[members][:, None] * k + xp.arange(k)[None, :]).astype(xp.int32).ravel()
    T = sparse.csr_matrix((Q[members].ravel(), cols, indptr), shape=(n, count * k))
    if nin == 0:
        T = sparse.csr_matrix((n, count * k))
    return T, R.reshape(count * k, k)


# --------------------------------------------------------------------------- spectral radius, smoothing, products
def rho_dinv_a_xp(A, dinv, xp, steps: int = LANCZOS_STEPS, seed: int = SEED) -> float:
    """rho(D^-1 A) for SPD A: the largest Ritz value of ``steps`` Lanczos steps on D^-1/2 A D^-1/2 (with xp; the
    tridiagonal's eigenvalues on the host); small matrices exactly."""
    n = A.shape[0]
    s = xp.sqrt(xp.maximum(dinv, 0.0))
    if n <= 4 * steps:
        S = np.asarray(_host(s[:, None] * A.toarray() * s[None, :]))
        return float(np.max(np.abs(np.linalg.eigvalsh(0.5 * (S + S.T))))) if n else 1.0
    A = A.tocsr()
    As = A.__class__((A.data * s[entry_rows(A, xp)] * s[A.indices], A.indices, A.indptr), shape=A.shape)
    v = hashed_indices(n, xp, seed).astype(xp.float64) - 2.0**31     # a rough start, made on the device
    v /= xp.sqrt(v @ v)
    v_prev = xp.zeros(n)
    # the coefficients stay where the vectors are (no host round trip per step: on a GPU those synchronizations, and
    # launches, were most of the set-up's Lanczos time); the steps after a breakdown are computed and dropped below
    alpha, beta, b = [], [], 0.0
    with np.errstate(all="ignore"):
        for _ in range(steps):
            w = As @ v
            a = v @ w
            w -= a * v + b * v_prev
            b = xp.sqrt(w @ w)
            alpha.append(a)
            beta.append(b)
            v_prev, v = v, w / xp.where(b > 0, b, 1.0)
    alpha = np.asarray(_host(xp.stack(alpha)), dtype=np.float64)
    beta = np.asarray(_host(xp.stack(beta)), dtype=np.float64)
    ok = beta > 1e-12 * np.abs(alpha)
    k = steps if ok.all() else int(np.argmin(ok)) + 1     # up to the first breakdown, its alpha included
    Tk = np.diag(alpha[:k]) + np.diag(beta[:k - 1], 1) + np.diag(beta[:k - 1], -1)
    return float(np.max(np.abs(np.linalg.eigvalsh(Tk))))


def _host(a):
    return a.get() if hasattr(a, "get") else a


def _dinv(A, xp):
    d = A.diagonal()
    return xp.where(d > 0, 1.0 / xp.where(d > 0, d, 1.0), 0.0)


def _scale_rows(M, s, xp, sparse):
    """diag(s) M as a new CSR matrix."""
    M = M.tocsr()
    return sparse.csr_matrix((M.data * s[entry_rows(M, xp)], M.indices, M.indptr), shape=M.shape)


def _canonical(M, sparse):
    M = M.tocsr()
    M.sum_duplicates()
    if not M.has_sorted_indices:
        M.sort_indices()
    return M


def improve_candidates(A, B, dinv, rho: float, xp, steps: int = IMPROVE_STEPS):
    """B after ``steps`` weighted Jacobi steps on A B = 0 (omega 4/3 over rho(D^-1 A))."""
    w = (SA_OMEGA / rho) * dinv
    for _ in range(steps):
        B = B - w[:, None] * (A @ B)
    return B


def smoothed_level(A, T, rho: float, dinv, xp, sparse):
    """(P, A_c): P = T - omega / rho D^-1 (A T) and the Galerkin A_c = P^T (A P), canonical CSR."""
    AT = A @ T
    P = _canonical(T - _scale_rows(AT, (SA_OMEGA / rho) * dinv, xp, sparse), sparse)
    Ac = _canonical(P.T.tocsr() @ _canonical(A @ P, sparse), sparse)
    return P, Ac


def _aggregate(G, theta: float, opts, candidates: int, block: int, xp):
    """(aggregate of every unknown, count) from the strength graph of G (one node per ``block`` unknowns) at
    threshold ``theta``; the second pass where a node is one coarse unknown (one candidate): with k candidates every
    extra aggregate is k coarse unknowns (Cook's membrane, 3 rigid-body modes: operator complexity 1.38 -> 1.79)."""
    indptr, indices, strength = strength_graph(G, theta, xp, with_strength=True)
    agg, count = mis2_aggregate(indptr, indices, xp, strength=strength,
                                second_pass=opts.aggregation_passes == 2 and candidates == 1)
    return (xp.repeat(agg, block) if block > 1 else agg), count


# --------------------------------------------------------------------------- the hierarchy
def sa_levels_xp(A, opts, B, max_levels: int, xp, sparse, structure: SAStructure | None = None,
                 rhos: list | None = None):
    """([(A_l, P_l), ...], the coarsest A, SAStructure): smoothed aggregation of square CSR ``A`` (a matrix of
    ``sparse``) until ``opts.coarse_size`` rows or ``max_levels`` levels, or until the strength threshold leaves
    nothing to aggregate (that level is the coarsest). With ``structure`` (of an earlier set-up of a matrix with
    the same sparsity) the aggregates are taken from it: only the numeric part is computed. ``rhos``: a list that
    gets rho(D^-1 A_l) of every returned level (the Lanczos estimate the prolongation smoothing used; the V-cycle's
    smoothers take it as lambda_max)."""
    A = _canonical(sparse.csr_matrix(A), sparse)
    n = A.shape[0]
    B = xp.ones((n, 1)) if B is None else xp.asarray(B, dtype=xp.float64).reshape(n, -1)
    reuse = structure is not None
    out = structure if reuse else SAStructure()
    pairs, block = [], 1
    while len(pairs) < max_levels - 1 and (A.shape[0] > opts.coarse_size if not reuse else len(pairs) < len(out.counts)):
        l = len(pairs)
        dinv = _dinv(A, xp)
        rho = rho_dinv_a_xp(A, dinv, xp)
        if reuse:
            agg, count = out.aggregates[l], out.counts[l]
        else:
            G = node_graph(A, block, xp, sparse)
            theta = opts.strength_at(l, B.shape[1])
            agg, count = _aggregate(G, theta, opts, B.shape[1], block, xp)
            if theta > 0 and count * B.shape[1] > SLOW_COARSENING * A.shape[0]:   # too few strong connections
                theta = 0.0
                agg, count = _aggregate(G, theta, opts, B.shape[1], block, xp)
            if count == 0:
                break   # nothing strong enough to aggregate along: this level is the coarsest
        if l == 0:
            B = improve_candidates(A, B, dinv, rho, xp)
        T, Bc = tentative(agg, count, B, xp, sparse)
        if T.shape[1] >= A.shape[0]:
            break
        P, Ac = smoothed_level(A, T, rho, dinv, xp, sparse)
        if not reuse and theta > 0 and Ac.nnz > DENSE_COARSENING * A.nnz:   # aggregates too small for their candidates
            agg, count = _aggregate(G, 0.0, opts, B.shape[1], block, xp)
            T, Bc = tentative(agg, count, B, xp, sparse)
            if T.shape[1] >= A.shape[0]:
                break
            P, Ac = smoothed_level(A, T, rho, dinv, xp, sparse)
        if not reuse:
            out.aggregates.append(agg)
            out.counts.append(count)
            out.blocks.append(block)
            out.rows.append(A.shape[0])
        pairs.append((A, P))
        if rhos is not None:
            rhos.append(rho)
        A, B, block = Ac, Bc, B.shape[1]
    return pairs, A, out


# --------------------------------------------------------------------------- the builder
class DeviceSABuilder(HierarchyBuilder):
    """Smoothed aggregation set up with the backend's array module (:func:`sa_levels_xp`). The aggregates are kept on
    the prepared matrix (``A.cache``, key ("structure",) + the hierarchy's key; a values-only update of A keeps
    them): a later set-up of A with new values, for the same grid and near-null space objects, reuses them and
    computes the numeric part only (``setup_kind`` "numeric", ``full_setup_time_s`` the full set-up's)."""

    algebraic = True

    def aggregate(self, A, h: Hierarchy, cur, nns, xp, sparse):
        h.amg_setup = "device"
        skey = ("structure",) + self.key
        kept = A.cache.get(skey)
        if kept is not None and (kept["grid"] is not self.grid or kept["nns"] is not self.near_nullspace):
            kept = None
        B = None if nns is None else xp.asarray(nns)
        rhos: list = []
        pairs, cur, structure = sa_levels_xp(cur, self.options, B, self.options.max_levels - len(self.mats), xp,
                                             sparse, structure=None if kept is None else kept["structure"], rhos=rhos)
        for (Al, Pl), rho in zip(pairs, rhos):
            self.lambdas[len(self.mats)] = rho
            self.mats.append((canonical(Al, sparse), canonical(Pl, sparse), "aggregation", None))
        if kept is None:
            A.cache[skey] = {"structure": structure, "grid": self.grid, "nns": self.near_nullspace,
                             "full_setup_time_s": float("nan")}
            h.setup_kind = "full"
        else:
            h.setup_kind = "numeric"
            h.full_setup_time_s = kept["full_setup_time_s"]
        return cur

    def timed(self, A, h: Hierarchy) -> None:
        """A full set-up's time, kept with the aggregates (the report of a later numeric set-up shows it)."""
        kept = A.cache.get(("structure",) + self.key)
        if h.setup_kind == "full" and kept is not None:
            kept["full_setup_time_s"] = h.setup_time_s
