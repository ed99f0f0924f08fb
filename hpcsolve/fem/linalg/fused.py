"""The fused kernels of the FEM conjugate gradients and multigrid, described once.

Each :class:`Fused` is one operation: its arguments (``params``), its type parameters (``types``: the working
precision T, a pair TA / TO or TX / TY, a storage type S), the instantiations the CUDA module compiles
(``instances``) and its body. Two printers turn a description into code:

- :mod:`hpcsolve.fem.linalg.fused_cuda`: CUDA C templates (the CuPy RawModule of ``kernels_cupy``),
- :mod:`hpcsolve.fem.linalg.fused_numba`: Python source for ``numba.cuda.jit``, exec'd per type binding
  (``kernels_numba``).

The NumPy reference (``kernels_numpy_low``) stays written by hand: it checks the two GPU implementations.

**Arguments** (``params``: ``;``-separated ``[kind] type name``, type a C scalar type or a type parameter):

============  ==================================  ==============================
kind          CUDA C                              Numba
============  ==================================  ==============================
(none)        ``const int n`` (a scalar)          ``n``
``plain``     ``int n`` (a scalar, not const)     ``n``
``in``        ``const T* __restrict__ p``         ``p``
``out``       ``T* __restrict__ p`` (written)     ``p``
``rd``        ``const T* p`` (may alias)          ``p``
``rw``        ``T* p`` (may alias)                ``p``
kind + ``?``  the same, may be null (0)           ``p, has_p`` (a placeholder array and a flag)
============  ==================================  ==============================

**Body**: a restricted Python, read into the code generator's nodes (``hpcsolve.core.codegen.frontend``; anything else
is refused) and printed by its printers:

- ``x: T = e`` declares (``x: const(T) = e`` a const); ``decl(T, a=e1, b=e2)`` declares several in one statement
  (Numba: ``x = T(e)``, so that a float32 kernel really computes in float32);
- ``for i in grid(n)``: the grid-stride loop over n; ``for k in range(a, b)`` / ``range(m)``;
  ``for j in block_stride(K)``: the threads of one block; ``while``, ``if``/``else``, ``continue``, ``return``;
- expressions: ``+ - * / >>``, comparisons, ``and or not``, ``a if c else b``, subscripts; casts ``T(e)``,
  ``double(e)``, ``size_t(e)``; ``ldg(p, j)`` (a read-only load ``p[j]``, ``__ldg`` in CUDA C);
  ``widen(T, v)`` (a stored value of any storage type in T); ``fmax``, ``fabs``, ``isfinite``; ``thread_x()``,
  ``sync()`` (``__syncthreads``); a device function ``f[S, T](...)`` (template arguments, dropped in Numba);
- an optional array used as a condition (``if dinv:``, ``dinv[i] * r[i] if dinv else r[i]``) tests whether it
  was given (CUDA C: the pointer is not null; Numba: its flag);
- reductions: ``block_add2(a, b, ws, ia, ib)`` (block sums, one float64 atomicAdd per block into ws[ia], ws[ib];
  an index < 0 skips) and ``block_max3(a, b, c, ws, ia, ib, ic)`` (block maxima of values >= 0, one atomic max
  per block). These are each backend's runtime (warp shuffles in CUDA C, a shared-memory tree in Numba), not
  described here.

**Numba-only hints**: ``wide``: index arithmetic in uint64 on a GPU (``I``; no negative-index wraparound on the
loads; one unsigned compare bounds an index); ``unroll = (count, offsets)``: a loop over ``range(count)`` is
written out per value of ``count`` (one kernel per count), the ``offsets`` loads hoisted out of the row loop.

Arithmetic order, types and parentheses are the CUDA C's: the printers keep the parentheses written here.
"""

from __future__ import annotations

import dataclasses
import functools
import textwrap

from hpcsolve.core.codegen.frontend import read

#: the CUDA instantiations: one working precision; two (computed / stored); storage S x compute T
ONE = (("float",), ("double",))
TWO = tuple((a, b) for a in ("float", "double") for b in ("float", "double"))
LEVEL = tuple((s, t) for s in ("__half", "float", "double") for t in ("float", "double"))

POINTER_KINDS = ("in", "out", "rd", "rw")
#: the C scalar types a body casts to; the runtime's functions it calls (besides the device functions below)
SCALAR_TYPES = ("double", "float", "int", "size_t")
RUNTIME = ("fmax", "fabs", "isfinite", "block_add2", "block_max3")


@dataclasses.dataclass(frozen=True)
class Param:
    name: str
    type: str
    kind: str = ""            # "" / "plain": a scalar; in / out / rd / rw: an array (see the module docstring)
    optional: bool = False    # an array that may be absent

    @property
    def pointer(self) -> bool:
        return self.kind in POINTER_KINDS

    @property
    def const(self) -> bool:
        """Not written through: a scalar other than ``plain``, an array ``in`` or ``rd``."""
        return self.kind in ("", "in", "rd")

    @property
    def restrict(self) -> bool:
        """An array that aliases no other (``in``, ``out``)."""
        return self.kind in ("in", "out")


@dataclasses.dataclass(frozen=True)
class Fused:
    """One fused operation (see the module docstring)."""

    name: str
    params: str
    types: tuple[str, ...] = ()
    instances: tuple[tuple[str, ...], ...] = ()
    body: str = ""
    returns: str = ""                      # a device function: its return type ("" : a kernel)
    doc: str = ""
    backends: tuple[str, ...] = ("cuda", "numba")
    wide: bool = False
    unroll: tuple[str, str] | None = None

    @functools.cached_property
    def args(self) -> tuple[Param, ...]:
        return parse_params(self.params)

    @functools.cached_property
    def source(self) -> str:
        return textwrap.dedent(self.body).strip("\n") + "\n"

    @property
    def device(self) -> bool:
        return bool(self.returns)

    @functools.cached_property
    def nodes(self) -> tuple:
        """The body as the code generator's nodes (``hpcsolve.core.codegen``), both printers' input."""
        return read(self.source, (*self.types, *SCALAR_TYPES), (*RUNTIME, *BY_NAME), self.name)


def parse_params(spec: str) -> tuple[Param, ...]:
    out = []
    for item in spec.split(";"):
        words = item.split()
        if len(words) == 2:
            words = ["", *words]
        if len(words) != 3 or not (words[1].isidentifier() and words[2].isidentifier()):
            raise ValueError(f"parameter {item!r}: not '[kind] type name'")
        kind, type_, name = words
        optional = kind.endswith("?")
        kind = kind.rstrip("?")
        if kind not in ("", "plain", *POINTER_KINDS) or (optional and kind not in POINTER_KINDS):
            raise ValueError(f"parameter {item!r}: unknown kind")
        out.append(Param(name, type_, kind, optional))
    return tuple(out)


_CSR = "int n; in int indptr; in int indices"

COEF = Fused("coef", "rd double ws; plain int inum; plain int iden; plain double c", returns="double", doc="""
coefficient c * ws[inum] / ws[iden] (iden < 0: c * ws[inum]; inum < 0: c); x / 0 -> 0""", body="""
    if inum < 0:
        return c
    if iden < 0:
        return c * ws[inum]
    d: const(double) = ws[iden]
    return c * ws[inum] / d if d != 0.0 else 0.0
""")

SPMV_DOT = Fused("spmv_dot", f"{_CSR}; in T vals; in T p; out T q; rw double ws; int i_pq", ("T",), ONE, wide=True,
                 doc="""
q = A p (CSR, int32 indices, one thread per row, grid-stride); ws[i_pq] += p.q
bytes: nnz*(sizeof(T)+4) + (n+1)*4 + n*sizeof(T) (p; neighbour gathers hit L1/L2) + n*sizeof(T) (q)""", body="""
    acc: T = 0
    for i in grid(n):
        s: T = 0
        end: const(int) = indptr[i + 1]
        for k in range(indptr[i], end):
            s += vals[k] * ldg(p, indices[k])
        q[i] = s
        acc += p[i] * s
    if i_pq >= 0:
        block_add2(double(acc), 0.0, ws, i_pq, -1)
""")

RESIDUAL = Fused("residual", f"{_CSR}; in TA vals; in TA x; in TA b; out TO r; in? TA dinv; rw double ws; int i_rz; "
                 "int i_rr", ("TA", "TO"), TWO, doc="""
r = b - A x computed in TA (A, x, b in TA), stored as TO; ws[i_rr] += r.r; with dinv: ws[i_rz] += r.dinv.r""",
                 body="""
    decl(TA, acc_rr=0, acc_rz=0)
    for i in grid(n):
        s: TA = 0
        end: const(int) = indptr[i + 1]
        for k in range(indptr[i], end):
            s += vals[k] * ldg(x, indices[k])
        ri: const(TA) = b[i] - s
        r[i] = TO(ri)
        acc_rr += ri * ri
        if dinv:
            acc_rz += ri * ri * dinv[i]
    block_add2(double(acc_rr), double(acc_rz), ws, i_rr, i_rz if dinv else -1)
""")

REPLACE_RESIDUAL = Fused("replace_residual", f"{_CSR}; in double vals; in double x; in double b; out TO r; out TO p; "
                         "in? double dinv; rw double ws; int i_rz; int i_rr", ("TO",), ONE, doc="""
reliable update: r_true = b - A x in float64; p += [dinv] (r_true - r_old) so that p is the direction
the true residual would have given; r = r_true (stored TO); ws[i_rr] += r.r; [ws[i_rz] += r.dinv.r]""", body="""
    decl(double, acc_rr=0, acc_rz=0)
    for i in grid(n):
        s: double = 0
        end: const(int) = indptr[i + 1]
        for k in range(indptr[i], end):
            s += vals[k] * ldg(x, indices[k])
        ri: const(double) = b[i] - s
        d: const(double) = ri - double(r[i])
        r[i] = TO(ri)
        p[i] = TO(double(p[i]) + (dinv[i] * d if dinv else d))
        acc_rr += ri * ri
        if dinv:
            acc_rz += ri * ri * dinv[i]
    block_add2(acc_rr, acc_rz, ws, i_rr, i_rz if dinv else -1)
""")

DOT = Fused("dot", "int n; in T x; in T y; rw double ws; int i", ("T",), ONE, wide=True, body="""
    acc: T = 0
    for k in grid(n):
        acc += x[k] * y[k]
    block_add2(double(acc), 0.0, ws, i, -1)
""")

AXPY = Fused("axpy", "int n; in TX x; out TY y; rd double ws; int inum; int iden; double c", ("TX", "TY"), TWO,
             doc="y += a x, computed in TY (x is cast)", body="""
    a: const(TY) = TY(coef(ws, inum, iden, c))
    for i in grid(n):
        y[i] += a * TY(x[i])
""")

PRECONDITION = Fused("precondition", "int n; in T dinv; in T r; out T z; rw double ws; int i_rz", ("T",), ONE,
                     doc="z = dinv r; ws[i] += r.z", body="""
    acc: T = 0
    for i in grid(n):
        zi: const(T) = dinv[i] * r[i]
        z[i] = zi
        acc += r[i] * zi
    block_add2(double(acc), 0.0, ws, i_rz, -1)
""")

PRECONDITION_INIT = Fused("precondition_init", "int n; in T r; out T p; in? T dinv; rw double ws; int i_rz; int i_rr",
                          ("T",), ONE, doc="""
p = [dinv] r; ws[i_rr] += r.r; with dinv ws[i_rz] += r.dinv.r (start of a CG run)""", body="""
    decl(T, acc_rr=0, acc_rz=0)
    for i in grid(n):
        ri: const(T) = r[i]
        zi: const(T) = dinv[i] * ri if dinv else ri
        p[i] = zi
        acc_rr += ri * ri
        acc_rz += ri * zi
    block_add2(double(acc_rr), double(acc_rz), ws, i_rr, i_rz if dinv else -1)
""")

UPDATE_R = Fused("update_r", "int n; out T r; in T q; in? T dinv; rw double ws; int i_rho; int i_pq; int i_rz; "
                 "int i_rr", ("T",), ONE, wide=True, doc="""
fused CG: r -= alpha q (alpha = ws[i_rho]/ws[i_pq]); ws[i_rr] += r.r; [ws[i_rz] += r.dinv.r]. bytes 3 n s (+ n s)""",
                 body="""
    alpha: const(T) = T(coef(ws, i_rho, i_pq, 1.0))
    decl(T, acc_rr=0, acc_rz=0)
    for i in grid(n):
        ri: const(T) = r[i] - alpha * q[i]
        r[i] = ri
        acc_rr += ri * ri
        if dinv:
            acc_rz += ri * ri * dinv[i]
    block_add2(double(acc_rr), double(acc_rz), ws, i_rr, i_rz if dinv else -1)
""")

UPDATE_XP = Fused("update_xp", "int n; out T x; out T p; in T r; in? T dinv; rd double ws; int i_rho; int i_pq; "
                  "int bnum; int bden; double bc", ("T",), ONE, wide=True, doc="""
fused CG: x += alpha p; p = [dinv] r + beta p (beta = coefficient (bnum, bden, bc): CG rho_{j+1}/rho_j,
flexible CG -z_{j+1}.q_j / p_j.q_j). bytes 5 n s (+ n s)""", body="""
    alpha: const(T) = T(coef(ws, i_rho, i_pq, 1.0))
    beta: const(T) = T(coef(ws, bnum, bden, bc))
    for i in grid(n):
        pi: const(T) = p[i]
        x[i] += alpha * pi
        p[i] = (dinv[i] * r[i] if dinv else r[i]) + beta * pi
""")

LEVEL_ROW = Fused("level_row", "int i; in int indptr; in int indices; in S vals; in? T rowscale; in T x", ("S", "T"),
                  returns="T", doc="""
multigrid levels: CSR (rows x cols, int32 indices) with values stored in S (double, float or __half),
applied in T; optional per-row scale (16-bit storage keeps rows scaled to a unit diagonal):
(M x)_i = rowscale_i * sum_k T(vals_k) x_{indices_k}""", body="""
    s: T = 0
    end: const(int) = indptr[i + 1]
    for k in range(indptr[i], end):
        s += widen(T, vals[k]) * ldg(x, indices[k])
    return rowscale[i] * s if rowscale else s
""")

CSR_APPLY = Fused("csr_apply", "int rows; in int indptr; in int indices; in S vals; in? T rowscale; in T x; rd? T b; "
                  "rw T y; double a; double c", ("S", "T"), LEVEL, doc="""
y = a (M x) + c b in T (b null: y = a M x). b may be y itself: each row reads its own b[i] before writing y[i]
(so neither carries __restrict__). bytes: nnz (sizeof(S) + 4) + (rows+1) 4 [+ rows sizeof(T)] + cols sizeof(T)
+ rows sizeof(T) [+ rows sizeof(T) for b]""", body="""
    decl(const(T), ta=T(a), tc=T(c))
    for i in grid(rows):
        s: const(T) = level_row[S, T](i, indptr, indices, vals, rowscale, x)
        y[i] = ta * s + tc * b[i] if b else ta * s
""")

MG_SMOOTH = Fused("mg_smooth", f"{_CSR}; in S vals; in? T rowscale; in T x_in; in T b; in T dinv; out T d; out T x_out; "
                  "double c_d; double c_r; int first", ("S", "T"), LEVEL, doc="""
one Chebyshev (c_d != 0) or damped-Jacobi (c_d = 0) step on M x = b, in T:
first: d = c_r dinv b; x_out = d (x_in not read)
else:  d = c_d d + c_r dinv (b - M x_in); x_out = x_in + d (x_out never aliases x_in)""", body="""
    decl(const(T), cd=T(c_d), cr=T(c_r))
    if first:
        for i in grid(n):
            di: const(T) = (dinv[i] * b[i]) * cr
            d[i] = di
            x_out[i] = di
    else:
        for i in grid(n):
            ri: const(T) = b[i] - level_row[S, T](i, indptr, indices, vals, rowscale, x_in)
            di: const(T) = cd * d[i] + cr * (dinv[i] * ri)
            d[i] = di
            x_out[i] = x_in[i] + di
""")

_DIA = "int n; int ndiag; in int offsets; in S vals; in? T rowscale"

DIA_ROW = Fused("dia_row", f"int i; {_DIA}; in T x", ("S", "T"), returns="T", wide=True, unroll=("ndiag", "offsets"),
                doc="""
the same on a level stored by diagonals (DIA: square n x n, ndiag offsets, values diagonal-major,
vals[d n + i] = a_{i, i + offsets[d]}, 0 where that is outside the matrix): no column indices to read.
bytes: ndiag n sizeof(S) + ndiag 4 [+ n sizeof(T)] + vectors as above""", body="""
    s: T = 0
    for k in range(ndiag):
        j: const(int) = i + ldg(offsets, k)
        if j >= 0 and j < n:
            s += widen(T, vals[size_t(k) * n + i]) * ldg(x, j)
    return rowscale[i] * s if rowscale else s
""")

DIA_APPLY = Fused("dia_apply", f"{_DIA}; in T x; rd? T b; rw T y; double a; double c", ("S", "T"), LEVEL, wide=True,
                  unroll=("ndiag", "offsets"), body="""
    decl(const(T), ta=T(a), tc=T(c))
    for i in grid(n):
        s: const(T) = dia_row[S, T](i, n, ndiag, offsets, vals, rowscale, x)
        y[i] = ta * s + tc * b[i] if b else ta * s
""")

DIA_SMOOTH = Fused("dia_smooth", f"{_DIA}; in T x_in; in T b; in T dinv; out T d; out T x_out; double c_d; "
                   "double c_r", ("S", "T"), LEVEL, wide=True, unroll=("ndiag", "offsets"), body="""
    decl(const(T), cd=T(c_d), cr=T(c_r))
    for i in grid(n):
        ri: const(T) = b[i] - dia_row[S, T](i, n, ndiag, offsets, vals, rowscale, x_in)
        di: const(T) = cd * d[i] + cr * (dinv[i] * ri)
        d[i] = di
        x_out[i] = x_in[i] + di
""")

FOLD = Fused("fold", "int n; out double x; out T y", ("T",), ONE, doc="""
x64 += y; y = 0 (fold a float32 correction into the float64 solution)""", body="""
    for i in grid(n):
        x[i] += double(y[i])
        y[i] = 0
""")

CHECK_MATRIX = Fused("check_matrix", f"{_CSR}; in double vals; out double dinv; rw double ws; int base", doc="""
Validation of a CSR matrix (rows sorted, no duplicates; float64 values), one row per thread, before a solve:
ws[base+0] += non-finite values, ws[base+5] += column indices outside [0, n), ws[base+3] += rows whose
diagonal entry is missing or not > 0; maxima of |a_ij| (base+1), |a_ij - a_ji| (base+2; a_ji found by binary
search in row j, 0 where missing) and |a_ii| (base+4); dinv[i] = 1 / a_ii where a_ii > 0, else 0.
One pass over A plus one search per off-diagonal entry (a check once per matrix, not a hot loop).""", body="""
    decl(double, nonfinite=0, bad_index=0, bad_diag=0, max_abs=0, max_asym=0, max_diag=0)
    for i in grid(n):
        d: double = 0.0
        end: const(int) = indptr[i + 1]
        for k in range(indptr[i], end):
            j: const(int) = indices[k]
            v: const(double) = vals[k]
            if not isfinite(v):
                nonfinite += 1.0
                continue
            if j < 0 or j >= n:
                bad_index += 1.0
                continue
            max_abs = fmax(max_abs, fabs(v))
            if j == i:
                d = v
                continue
            decl(int, lo=indptr[j], hi=indptr[j + 1])
            while lo < hi:
                mid: const(int) = lo + ((hi - lo) >> 1)
                if indices[mid] < i:
                    lo = mid + 1
                else:
                    hi = mid
            w: const(double) = vals[lo] if (lo < indptr[j + 1] and indices[lo] == i) else 0.0
            max_asym = fmax(max_asym, fabs(v - w))
        if d > 0.0:
            dinv[i] = 1.0 / d
        else:
            dinv[i] = 0.0
            bad_diag += 1.0
        max_diag = fmax(max_diag, fabs(d))
    block_add2(nonfinite, bad_index, ws, base + 0, base + 5)
    sync()
    block_add2(bad_diag, 0.0, ws, base + 3, -1)
    block_max3(max_abs, max_asym, max_diag, ws, base + 1, base + 2, base + 4)
""")

BLOCK_START = Fused("block_start", "rw double ws; int i_rho; int i_pq; int i_rr; int K", doc="""
zero the block's accumulators: rho[1..K], pq[0..K-1], rr[1..K]""", body="""
    for j in block_stride(K):
        ws[i_rho + 1 + j] = 0.0
        ws[i_pq + j] = 0.0
        ws[i_rr + 1 + j] = 0.0
""")

BLOCK_END = Fused("block_end", "rw double ws; int i_rho; int i_rr; int k", doc="""
carry the last iteration's scalars into slot 0 for the next block""", body="""
    if thread_x() == 0:
        ws[i_rho] = ws[i_rho + k]
        ws[i_rr] = ws[i_rr + k]
""")

# ---- Numba only (CuPy has these as array methods)
FILL_ZERO = Fused("fill_zero", "rw T a; int start; int count", ("T",), backends=("numba",), body="""
    for i in grid(count):
        a[start + i] = 0
""")

CAST_COPY = Fused("cast_copy", "int n; in TA src; out TO dst; double scale", ("TA", "TO"), backends=("numba",),
                  doc="dst = scale * src, computed in the wider type (the caller passes scale in it)", body="""
    for i in grid(n):
        dst[i] = src[i] * scale
""")

#: every description, in the order of the CUDA module
ALL = (COEF, SPMV_DOT, RESIDUAL, REPLACE_RESIDUAL, DOT, AXPY, PRECONDITION, PRECONDITION_INIT, UPDATE_R, UPDATE_XP,
       LEVEL_ROW, CSR_APPLY, MG_SMOOTH, DIA_ROW, DIA_APPLY, DIA_SMOOTH, FOLD, CHECK_MATRIX, BLOCK_START, BLOCK_END,
       FILL_ZERO, CAST_COPY)
BY_NAME = {op.name: op for op in ALL}
