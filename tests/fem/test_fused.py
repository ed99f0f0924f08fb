"""The one description of the FEM's fused kernels (``hpcsolve.fem.linalg.fused``) and its two printers: CUDA C
(``fused_cuda``, compiled by ``kernels_cupy``) and Numba (``fused_numba``, exec'd by ``kernels_numba``).

No GPU here: the CUDA C is compared token for token with the hand-written source it replaced (NVRTC compiles it in
tests/core/test_cuda_compile.py), the Numba source is compiled as Python; the Numba kernels run under the simulator in
tests/fem/test_mg_kernels.py, tests/test_cudasim_paths.py and tests/fem/test_cg_variants.py.
"""

from __future__ import annotations

import ast
import hashlib
import re

import pytest

from hpcsolve.fem.linalg import fused, fused_cuda, fused_numba

#: sha256 of the tokens (comments and whitespace dropped) of the CUDA C module as it was written by hand before the
#: kernels were described once: the printed module is the same code, so the same speed (its PTX for sm_90 was
#: byte-identical). A deliberate kernel change updates this digest.
HAND_WRITTEN_TOKENS = "57e821b185801ee3a5284400a4a34d62a7397ffeb45a78e06b3a4e7371bd74ac"


def _tokens(code: str) -> list[str]:
    code = re.sub(r"//[^\n]*", "", code)
    return re.findall(r"[A-Za-z_]\w*|\d+\.\d*|\d+|\S", code)


def test_the_cuda_module_is_the_hand_written_one_token_for_token():
    from hpcsolve.fem.linalg import kernels_cupy

    tokens = _tokens(kernels_cupy.source())
    assert hashlib.sha256(" ".join(tokens).encode()).hexdigest() == HAND_WRITTEN_TOKENS


def test_the_name_expressions_are_every_instantiation():
    from hpcsolve.fem.linalg import kernels_cupy

    names = kernels_cupy._names()
    assert len(names) == len(set(names)) == 51
    assert names[:2] == ["replace_residual<float>", "replace_residual<double>"]
    assert "dia_smooth<__half,float>" in names and names[-3:] == ["block_start", "block_end", "check_matrix"]
    described = {op.name for op in fused.ALL if "cuda" in op.backends and not op.device}
    assert {n.split("<")[0] for n in names} == described


@pytest.mark.parametrize("op", [op for op in fused.ALL if "cuda" in op.backends], ids=lambda op: op.name)
def test_cuda_printer_signature_follows_the_parameter_kinds(op):
    text = fused_cuda.print_cuda(op)
    head = next(line for line in text.splitlines() if not line.startswith(("//", "template")))
    assert head.startswith("__device__ __forceinline__" if op.device else "__global__ void")
    for p in op.args:
        if p.kind == "in":
            assert f"const {p.type}* __restrict__ {p.name}" in head
        elif p.kind == "out":
            assert re.search(rf"(?<!const ){p.type}\* __restrict__ {p.name}\b", head)
        elif p.kind == "":
            assert f"const {p.type} {p.name}" in head


def test_cuda_printer_keeps_written_parentheses_and_c_precedence():
    op = fused.Fused("t", "int n; out T y; in T a; in T b", ("T",), fused.ONE, body="""
        for i in grid(n):
            y[i] = (a[i] * b[i]) * a[i] + T(a[i] + b[i]) - (b[i] if a else a[i])
    """)
    text = fused_cuda.print_cuda(op)
    assert "y[i] = (a[i] * b[i]) * a[i] + (T)(a[i] + b[i]) - (a ? b[i] : a[i]);" in text


def _source(ops, unsigned, count=None):
    text = fused_numba.numba_source(ops, unsigned, count)
    compile(text, "<test>", "exec")
    return text


@pytest.mark.parametrize("unsigned", [True, False], ids=["uint64", "int"])
def test_numba_printer_compiles_every_description(unsigned):
    plain = [op for op in fused.ALL if "numba" in op.backends and not op.unroll]
    text = _source(plain, unsigned)
    for op in plain:
        assert re.search(rf"^def {op.name}\(", text, re.M)
    for count in (1, 4, 9):
        _source((fused.DIA_ROW, fused.DIA_APPLY, fused.DIA_SMOOTH), unsigned, count)


def _function(text, name):
    tree = ast.parse(text)
    return next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == name)


def test_numba_printer_flags_optional_arrays_and_casts_declarations():
    text = _source((fused.UPDATE_R,), unsigned=True)
    fn = _function(text, "update_r")
    assert [a.arg for a in fn.args.args][:5] == ["n", "r", "q", "dinv", "has_dinv"]
    assert "acc_rr = T(0)" in text and "ri = T(r[i] - alpha * q[i])" in text          # float32 stays float32
    assert "if has_dinv:" in text and "i_rz if has_dinv else -1" in text
    assert "nn = I(n)" in text and "while i < nn:" in text                              # wide: uint64 indices


def test_numba_printer_unrolls_the_diagonals_and_hoists_the_offsets():
    gpu = _source((fused.DIA_ROW, fused.DIA_APPLY), unsigned=True, count=3)
    assert [a.arg for a in _function(gpu, "dia_apply").args.args][:3] == ["n", "offsets", "vals"]   # no ndiag
    assert [a.arg for a in _function(gpu, "dia_row").args.args][:5] == ["i", "n", "o0", "o1", "o2"]
    assert "o2 = I(offsets[2])" in gpu and "dia_row(i, nn, o0, o1, o2, vals, rowscale, has_rowscale, x)" in gpu
    assert ">= 0" not in gpu and gpu.count("if j < n:") == 3                         # one unsigned compare
    sim = _source((fused.DIA_ROW,), unsigned=False, count=2)
    assert sim.count("if j >= 0 and j < n:") == 2


def test_printers_refuse_what_is_not_in_the_kernel_language():
    bad = fused.Fused("bad", "int n; out T y", ("T",), fused.ONE, body="""
        for i in grid(n):
            y[i] = print(i)
    """)
    with pytest.raises(SyntaxError):
        fused_cuda.print_cuda(bad)
    skip = fused.Fused("skip", "int n; out T y", ("T",), fused.ONE, body="""
        for i in grid(n):
            if i == 0:
                continue
            y[i] = 0
    """)
    with pytest.raises(SyntaxError, match="continue"):
        fused_numba.numba_source((skip,), unsigned=False)
    for spec in ("int? n", "ptr T x", "in? T"):
        with pytest.raises(ValueError):
            fused.parse_params(spec)
