"""The one code generator (``hpcsolve.core.codegen``): its node set, its printers (CUDA C; Numba: Python source and,
for the typed scalar nodes, LLVM IR), and the families' printers built on them.

- Every node type has a method in each printer that prints it (enumerated by introspection of the node modules),
  and a node type a printer does not know is a clear error, not wrong code.
- No printer dispatches on a string kind of its nodes (an ``ast`` scan: no ``.kind ==`` comparison).
- Numbers: a device function in the node set, printed by the Numba printer and run as plain Python, and printed by
  the C printer and compiled for the host, gives the NumPy reference's values; so do the FEM's fused SpMV and CG
  update printed for Numba and run as plain Python; typed scalar nodes emitted as LLVM IR and compiled for the host
  compute the C value (the FP16C codec's C and LLVM IR are checked bit for bit in tests/core/test_fp16c.py and
  tests/core/test_codecs.py). The step kernels run under the CUDA simulator in tests/lbm/test_cudasim_lbm.py.
"""

from __future__ import annotations

import ast
import ctypes
import dataclasses
import inspect
import math
import pathlib
import shutil
import subprocess
from types import SimpleNamespace

import llvmlite.binding as llvm
import numpy as np
import pytest
import scipy.sparse as sp
from llvmlite import ir as llir

from hpcsolve.core import scalar_ir
from hpcsolve.core.codegen import c as cg_c
from hpcsolve.core.codegen import frontend
from hpcsolve.core.codegen import llvm as cg_llvm
from hpcsolve.core.codegen import nodes
from hpcsolve.core.codegen import numba as cg_numba
from hpcsolve.core.codegen.printer import UnknownNode
from hpcsolve.core.precision import FP32
from hpcsolve.fem.linalg import fused, fused_cuda, fused_numba
from hpcsolve.lbm import physics
from hpcsolve.lbm.lattice import CX, CY
from hpcsolve.lbm.kernels import kernel_plan, print_cuda, print_numba
from hpcsolve.lbm.kernels.population_code import cuda_code, numba_code

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _classes(module) -> set[type]:
    return {c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == module.__name__}


def _has(printer: type, node: type) -> bool:
    return callable(getattr(printer, f"visit_{node.__name__}", None))


# ---- every node type has a method in each printer -----------------------------------------------------------------

def test_the_node_groups_are_every_node_class_of_the_node_module():
    groups = nodes.SCALAR_NODES + nodes.KERNEL_EXPRESSIONS + nodes.STATEMENTS + nodes.CONTAINERS
    assert len(groups) == len(set(groups))
    assert set(groups) == _classes(nodes) - {nodes.Scalar}


def test_the_c_printer_has_a_method_for_every_node_type():
    missing = [c.__name__ for c in _classes(nodes) - {nodes.Scalar} if not _has(cg_c.CPrinter, c)]
    assert missing == []


def test_the_numba_printers_have_a_method_for_every_node_type():
    """Kernel nodes print as Python (``codegen.numba``); the typed scalar nodes and their statements reach Numba as
    LLVM IR (``codegen.llvm``, the body of an intrinsic)."""
    python = nodes.KERNEL_EXPRESSIONS + nodes.STATEMENTS + (nodes.Kernel, nodes.Function)
    llvm = nodes.SCALAR_NODES + (nodes.Let, nodes.Lets, nodes.Var, nodes.Update, nodes.Return, nodes.Fn)
    assert set(python) | set(llvm) == _classes(nodes) - {nodes.Scalar}
    assert [c.__name__ for c in python if not _has(cg_numba.PythonPrinter, c)] == []
    assert [c.__name__ for c in llvm if not _has(cg_llvm.LLVMPrinter, c)] == []


_LBM_PLANNING = {kernel_plan.StateLayout, kernel_plan.StepLayout, kernel_plan.LinkRule, kernel_plan.ListKernel,
                 kernel_plan.PairPull, kernel_plan.PieceOp}


def test_the_lbm_printers_have_a_method_for_every_lbm_node_type():
    ops = set(kernel_plan.OPS.values())
    assert set(kernel_plan.NODES) | ops == _classes(kernel_plan) - _LBM_PLANNING
    for printer in (print_cuda.CPrinter, print_numba.PythonPrinter):
        assert [c.__name__ for c in kernel_plan.NODES if not _has(printer, c)] == []
    for printer in (print_cuda.OpPrinter, print_numba.OpPrinter):
        assert [c.__name__ for c in ops if not _has(printer, c)] == []


def _walk(node):
    """The nodes under ``node`` (a node, a tuple of nodes, a string or a number), itself included."""
    if isinstance(node, tuple):
        for x in node:
            yield from _walk(x)
    elif dataclasses.is_dataclass(node):
        yield node
        for f in dataclasses.fields(node):
            yield from _walk(getattr(node, f.name))


def test_the_fem_descriptions_are_nodes_their_printers_print():
    """The fused FEM operations are read into the node set (``codegen.frontend``) and printed by the code generator's
    printers (the FEM's subclasses keep its layout): every node type they use has a method in both."""
    used = {type(x) for op in fused.ALL for x in _walk(op.nodes)}
    assert used <= _classes(nodes)
    assert {nodes.GridLoop, nodes.Range, nodes.While, nodes.Cond, nodes.ReadOnly, nodes.Lets, nodes.Vars} <= used
    assert issubclass(fused_cuda.CudaPrinter, cg_c.CPrinter) and issubclass(fused_numba.NumbaPrinter,
                                                                            cg_numba.PythonPrinter)
    for printer in (fused_cuda.CudaPrinter, fused_numba.NumbaPrinter):
        assert [t.__name__ for t in used if not _has(printer, t)] == []


# ---- an unknown node type is a clear error -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Strange:
    """A node type no printer knows."""

    value: object = 0


def _printers():
    P = physics.physics_for(np.dtype(np.float32))
    return [cg_c.CPrinter(), cg_numba.PythonPrinter(), print_cuda.CPrinter(P, cuda_code(FP32)),
            print_numba.PythonPrinter(numba_code(FP32))]


@pytest.mark.parametrize("printer", _printers(), ids=lambda p: f"{type(p).__module__}.{type(p).__name__}")
def test_an_unknown_node_type_is_refused_by_name(printer):
    with pytest.raises(UnknownNode, match=r"cannot print a .*Strange node: it has no method visit_Strange"):
        printer.block((nodes.Let("a", "int", "1"), Strange()), 0)
    with pytest.raises(UnknownNode, match="visit_Strange"):
        printer.expr(nodes.Sel("c", Strange(), "b"))


def test_unknown_nodes_of_the_scalar_and_piece_printers_are_refused():
    with pytest.raises(UnknownNode, match="LLVMPrinter cannot print .*Strange"):
        cg_llvm.LLVMPrinter(None, {}).value(Strange())
    P = physics.physics_for(np.dtype(np.float32))
    with pytest.raises(UnknownNode, match="OpPrinter cannot print .*Strange"):
        print_cuda.emit_ops((Strange(),), P, cuda_code(FP32), None, {}, "t_")
    with pytest.raises(UnknownNode, match="OpPrinter cannot print .*Strange"):
        print_numba.emit_ops((Strange(),), None, numba_code(FP32))
    with pytest.raises(ValueError, match="unknown kernel op 'teleport'"):
        kernel_plan.Op("teleport")


def test_the_kernel_language_reader_refuses_what_it_does_not_know():
    with pytest.raises(SyntaxError, match=r"t: '\[1\]' is not in the kernel language"):
        frontend.read("x: T = [1]\n", ("T",), (), "t")
    with pytest.raises(SyntaxError, match="t: unknown function print"):
        frontend.read("print(1)\n", (), (), "t")
    with pytest.raises(SyntaxError, match="chained comparison"):
        frontend.read("x: int = 1 < 2 < 3\n", (), (), "t")


# ---- no string dispatch on a node's kind ----------------------------------------------------------------------------

PRINTER_MODULES = ["hpcsolve/core/codegen/base.py", "hpcsolve/core/codegen/c.py", "hpcsolve/core/codegen/numba.py",
                   "hpcsolve/core/codegen/llvm.py", "hpcsolve/core/codegen/printer.py",
                   "hpcsolve/core/codegen/frontend.py", "hpcsolve/core/scalar_ir.py",
                   "hpcsolve/lbm/kernels/print_cuda.py", "hpcsolve/lbm/kernels/print_numba.py",
                   "hpcsolve/lbm/kernels/emit_cuda.py", "hpcsolve/lbm/kernels/emit_numba.py",
                   "hpcsolve/fem/linalg/fused_cuda.py", "hpcsolve/fem/linalg/fused_numba.py"]


def _kind_comparisons(tree) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Attribute) and side.attr in ("kind", "op"):
                    found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("path", PRINTER_MODULES)
def test_no_printer_dispatches_on_a_kind_string(path):
    assert _kind_comparisons(ast.parse((ROOT / path).read_text())) == []


def test_the_kind_scan_finds_a_kind_chain():
    assert _kind_comparisons(ast.parse("if op.kind == 'load':\n    pass\nelif x.op == '+':\n    pass\n")) == [
        "line 1: op.kind == 'load'", "line 3: x.op == '+'"]


# ---- numbers: printed code against the NumPy reference --------------------------------------------------------------

def _moments_function():
    """A device function in the node set: drho, ux, uy of nine populations h (C: written through pointers)."""
    inv = nodes.Sel(nodes.And("rho > -1", nodes.Not("rho == -1")), "1 / (1 + rho)", "0")
    body = (nodes.Var("rho", "real", "h[0]"),
            nodes.Unrolled("k", 8, (nodes.Update("rho", "+", "h[k + 1]"),)),
            nodes.Let("mx", "real", " + ".join(f"({c}) * h[{i}]" for i, c in enumerate(CX))),
            nodes.Let("my", "real", " + ".join(f"({c}) * h[{i}]" for i, c in enumerate(CY))),
            nodes.Let("inv", "real", inv))
    returns = (("drho", "real", "rho"), ("ux", "real", nodes.Fmt("{} * inv", ("mx",))), ("uy", "real", "my * inv"))
    return nodes.Function("moments", "drho, ux, uy", (("h", "real_in"),), body, returns, inline=False)


def _reference(h):
    drho = h.sum()
    return drho, CX @ h / (1 + drho), CY @ h / (1 + drho)


_H = np.random.default_rng(3).uniform(-0.05, 0.05, (5, 9))


def test_numba_printer_code_runs_as_python_and_matches_numpy():
    src = cg_numba.PythonPrinter().function_text(_moments_function())
    assert "rho += h[0 + 1]" in src and "return rho, mx * inv, my * inv" in src
    scope: dict = {}
    exec(compile(src, "<codegen test>", "exec"), scope)
    for h in _H:
        assert scope["moments"](h) == pytest.approx(_reference(h), rel=1e-14, abs=1e-15)
    assert scope["moments"](np.array([-1.0] + [0.0] * 8))[1:] == (0, 0)


class _CPrinter(cg_c.CPrinter):
    ARGS = {"real_in": "const real_t* __restrict__"}


def test_c_printer_code_compiled_for_the_host_matches_numpy(tmp_path):
    """The same function printed as C, compiled as host C (real_t = double) and called: NumPy's values."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no host C compiler")
    text = _CPrinter().function_text(_moments_function())
    assert "__device__ void moments(const real_t* __restrict__ h, real_t* drho, real_t* ux, real_t* uy) {" in text
    assert "const real_t inv = (rho > -1 && !(rho == -1)) ? 1 / (1 + rho) : 0;" in text
    src = tmp_path / "moments.c"
    src.write_text("#define __device__\n#define __restrict__\ntypedef double real_t;\n" + text)
    lib = tmp_path / "moments.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, capture_output=True)
    fn = ctypes.CDLL(str(lib)).moments
    for h in _H:
        out = [ctypes.c_double() for _ in range(3)]
        fn(h.ctypes.data_as(ctypes.POINTER(ctypes.c_double)), *(ctypes.byref(o) for o in out))
        assert [o.value for o in out] == pytest.approx(_reference(h), rel=1e-14, abs=1e-15)


def test_scalar_nodes_print_with_c_precedence_and_wrap_long_returns():
    x, y = scalar_ir.var("x", "u32"), scalar_ir.var("y", "u32")
    assert scalar_ir.c_expr((x - y + 3) * 2) == "(x - y + 3u) * 2u"
    assert scalar_ir.c_expr(scalar_ir.umin(x >> 1, 7) | (y << 2)) == "min(x >> 1, 7u) | (y << 2)"
    long = x
    for k in range(30):
        long = long | (y << k)
    fn = scalar_ir.Fn("wide", "u32", (("x", "u32"), ("y", "u32")), ((scalar_ir.Return(long),),))
    text = scalar_ir.c_source((fn,))
    assert "\n         | " in text            # a return past 120 columns breaks after its first operand


def test_scalar_nodes_emit_llvm_that_computes_the_c_value():
    """The LLVM printer's function, compiled for the host by llvmlite and run: folded constants and a select."""
    x = scalar_ir.var("x", "u32")
    decl, v = scalar_ir.let("v", (x * 3 + (scalar_ir.u32(5) << 2)) ^ x)
    fn = scalar_ir.Fn("f", "u32", (("x", "u32"),), ((decl,), (scalar_ir.Return(
        scalar_ir.select(v.lt(scalar_ir.u32(100)), v, scalar_ir.u32(100))),)))
    module = llir.Module(name="t")
    f = llir.Function(module, llir.FunctionType(llir.IntType(32), [llir.IntType(32)]), name="f")
    b = llir.IRBuilder(f.append_basic_block())
    b.ret(scalar_ir.llvm_call(fn, b, [f.args[0]]))
    text = str(module)
    assert "add i32 %\".4\", 20" in text and "shl" not in text        # 5 << 2 folded
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(text), llvm.Target.from_default_triple()
                                        .create_target_machine())
    engine.finalize_object()
    cfun = ctypes.CFUNCTYPE(ctypes.c_uint32, ctypes.c_uint32)(engine.get_function_address("f"))
    for value in (0, 1, 7, 30, 1 << 31, 0xFFFFFFFF):
        want = ((value * 3 + 20) & 0xFFFFFFFF) ^ value
        assert cfun(value) == min(want, 100)


class _Grid:
    """``cuda`` for one thread that covers the whole grid-stride loop (plain Python, no simulator)."""

    threadIdx = SimpleNamespace(x=0)
    blockDim = SimpleNamespace(x=1)

    @staticmethod
    def grid(_):
        return 0

    @staticmethod
    def gridsize(_):
        return 1


def _block_add2(a, b, ws, ia, ib):
    if ia >= 0:
        ws[ia] += a
    if ib >= 0:
        ws[ib] += b


def _fused_python(ops, T):
    scope = {"cuda": _Grid, "math": math, "float64": np.float64, "float32": np.float32, "I": int,
             "kernel": lambda f: f, "device": lambda f: f, "T": T, "block_add2": _block_add2}
    return fused_numba.build(ops, scope, unsigned=False)


@pytest.mark.parametrize("T", [np.float64, np.float32])
def test_fused_numba_code_runs_as_python_and_matches_numpy(T):
    """The FEM's fused SpMV + dot and CG r-update, printed for Numba and run as plain Python: NumPy's values."""
    n = 7
    A = sp.diags([-np.ones(n - 1), 2.5 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1], format="csr")
    rng = np.random.default_rng(1)
    p, r = rng.standard_normal(n).astype(T), rng.standard_normal(n).astype(T)
    k = _fused_python((fused.COEF, fused.SPMV_DOT, fused.UPDATE_R), T)
    q, ws = np.zeros(n, T), np.zeros(8)
    k["spmv_dot"](n, A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data.astype(T), p, q, ws, 1)
    tol = 1e-13 if T is np.float64 else 1e-5
    assert q == pytest.approx(A @ p.astype(np.float64), rel=tol, abs=tol)
    assert ws[1] == pytest.approx(float(p.astype(np.float64) @ q), rel=tol)
    ws[0] = 2.0                                              # rho: alpha = ws[0] / ws[1]
    dinv = (1 / A.diagonal()).astype(T)
    r0 = r.copy()
    k["update_r"](n, r, q, dinv, True, ws, 0, 1, 2, 3)
    alpha = 2.0 / ws[1]
    want = r0 - alpha * q
    assert r == pytest.approx(want, rel=tol, abs=tol)
    assert ws[3] == pytest.approx(float(want @ want), rel=10 * tol)
    assert ws[2] == pytest.approx(float(want @ (dinv * want)), rel=10 * tol)


EXPRESSIONS = ["a - (b - c)", "(a - b) - c", "a * (b + c) >> 2", "-(a + b) * c", "a[i + 1] * b[j] // 2 % 3",
               "a & b | c ^ d << 1", "(x if c else y) + 1", "x if a > b else (y if c else z)", "(a + b) * (c - d) - -a"]


@pytest.mark.parametrize("text", EXPRESSIONS + ["not (a < b) and c or d", "a >= 0 and a < n"])
def test_python_printer_writes_what_ast_unparse_writes(text):
    (stmt,) = frontend.read(f"v = {text}\n", (), (), "t")
    assert cg_numba.PythonPrinter().expr(stmt.value) == ast.unparse(ast.parse(text, mode="eval").body)


def test_operator_expressions_compute_the_same_in_c_and_python(tmp_path):
    """Each expression read into nodes, printed as C (compiled for the host, 64-bit integers) and as Python: the same
    values on non-negative inputs (where C's / and % are Python's // and %)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no host C compiler")
    exprs = [frontend.read(f"v = {text.replace('a[', 'arr[').replace('b[', 'arr[')}\n", (), (), "t")[0].value
             for text in EXPRESSIONS]
    args = "long a, long b, long c, long d, long i, long j, long x, long y, long z, const long* arr"
    src = "".join(f"long f{k}({args}) {{ return {_CPrinter().expr(e)}; }}\n" for k, e in enumerate(exprs))
    (tmp_path / "e.c").write_text(src)
    lib = tmp_path / "e.so"
    subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "e.c")], check=True,
                   capture_output=True)
    so = ctypes.CDLL(str(lib))
    rng = np.random.default_rng(7)
    arr = np.arange(40, dtype=np.int64) * 3 + 1
    for _ in range(20):
        values = dict(zip("abcdijxyz", (int(v) for v in rng.integers(0, 12, 9))))
        for k, e in enumerate(exprs):
            fn = so[f"f{k}"]
            fn.restype = ctypes.c_long
            got_c = fn(*(ctypes.c_long(values[v]) for v in "abcdijxyz"),
                       arr.ctypes.data_as(ctypes.POINTER(ctypes.c_long)))
            got_py = eval(cg_numba.PythonPrinter().expr(e), {"arr": arr.tolist(), **values})
            assert got_c == got_py, (EXPRESSIONS[k], values)
