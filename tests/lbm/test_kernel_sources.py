"""The generated kernels take their population loads and stores from the policy
(``hpcsolve.lbm.kernels.population_code``), and their code is what it was when that move was made.

- The load/store expressions of each emitter are the expected text, and evaluated on NumPy scalars
  they give the bits of ``Precision.encode`` / ``decode`` (every float16 value for fp16s).
- SOURCE_HASHES: the CUDA C (``emit_cuda.kernel_source``, ``bouzidi_source``) and the Numba Python
  (``emit_numba.kernel_source``, ``bouzidi_source``) of every policy x collision x kernel
  variant, hashed per group; the CUDA C as text, the Python as its token stream without comments.
  The values were first those of the sources generated before the loads and stores moved to
  population_code (commit 5f6b3b6); they changed on purpose when the boundary-cell lookups became hash
  tables (``gpu_common.cell_table``, session 5; benchmarked before and after in one device run) and when the
  outlet rule took the characteristic density (``physics.outlet_density``, session 5; a compiled variant of
  its own, ``characteristic=True``), and when both emitters began to write the kernels from one plan
  (``kernel_plan``: per-layout positions, the boundary rules' pieces from ``boundaries``, the force and
  Bouzidi list kernels; session 7, benchmarked before and after in one device run), and when the CUDA pair
  kernel began to pass raw words between lanes and FP16C got its cheaper codec (session 9, the fp16s and fp16c
  CUDA sources; benchmarked before and after in one device run), and when the step and moments kernels began to
  be printed from one description (``step_plan``; the CUDA C changed only in whitespace and in the removal of
  unused locals: the even moments kernel's coordinates, the AA odd step's xm / xp, three dead temporaries of
  the layer collision), and when the prelude's hash-table helpers (table_home, boundary_velocity, outlet_index,
  outlet_velocity), the collision helpers (collide_values, collide_store) and the pair kernel's locals began to be
  printed from one description (``helper_plan``; the CUDA C changed only in
  whitespace, one declaration per name and extra parentheses, checked by a token diff of all 829 sources; the
  Numba token streams did not change), and when the pull functions and the 16-bit pair kernel began to be
  printed from one description (``step_plan.pull_cell``, ``pair_plan``, session 16: the CUDA pull differs only in
  nested else-ifs and whitespace; the CUDA pair kernel widens its halves inside the fluid branch and loads all
  words before the shuffles; the Numba pull is unrolled per direction instead of calling a generic
  ``pull_boundary``, and fetches the outlet's own velocity once per cell; benchmarked before and after in one
  device run). A change to
  the physics or to a kernel template changes them on purpose: check the GPU tests and the benchmark,
  then print the new table with ``python tests/lbm/test_kernel_sources.py``.
"""

from __future__ import annotations

import hashlib
import io
import tokenize

import numpy as np
import pytest

from hpcsolve.lbm.kernels import emit_cuda, emit_numba
from hpcsolve.lbm.kernels.population_code import cuda_code, numba_code
from hpcsolve.core.precision import FP16C, FP16S, FP32, FP64

POLICIES = (FP64, FP32, FP16S)
#: the policies whose generated sources are pinned (FP16C's codec has its own tests, tests/core/test_fp16c.py)
HASHED = POLICIES + (FP16C,)
COLLISIONS = ("bgk", "trt")
#: (cells per thread, threads per block, in place) of emit_cuda.kernel_source
CUDA_VARIANTS = [(1, 256, False), (1, 128, False), (2, 128, False), (4, 256, False), (1, 256, True), (1, 128, True)]
#: (cells per thread, threads per block, pairs, exchange, in place) of emit_numba.kernel_source
NUMBA_VARIANTS = [(1, 256, False, "smem", False), (1, 128, False, "smem", False), (2, 128, False, "smem", False),
                  (1, 128, False, "smem", True), (1, 256, False, "smem", True)]
PAIR_VARIANTS = [(1, 64, True, "smem", False), (1, 64, True, "shfl", False), (1, 128, True, "smem", False)]

SOURCE_HASHES = {
    "cuda-bouzidi/fp16c": "2e56efa1592607889061",
    "cuda-bouzidi/fp16s": "f251b93365433e2fff5e",
    "cuda-bouzidi/fp32": "3c3e2a00692df047f5d2",
    "cuda-bouzidi/fp64": "708848745d8bac574d60",
    "cuda/fp16c/bgk": "a1012a2fddbd241b82fd",
    "cuda/fp16c/trt": "39b949f4a19dd7b0744f",
    "cuda/fp16s/bgk": "23751f2aaf57f64c8123",
    "cuda/fp16s/trt": "71a87bd5d2aff77b720c",
    "cuda/fp32/bgk": "065db2f25cbe7c1d625b",
    "cuda/fp32/trt": "b77cec3694adb594a919",
    "cuda/fp64/bgk": "d4a65aeecc12c3fa4160",
    "cuda/fp64/trt": "b0108e0818d019cd69f3",
    "numba-bouzidi/fp16c": "25d3d319ad6137f56bf2",
    "numba-bouzidi/fp16s": "8e3c2341f6797777389b",
    "numba-bouzidi/fp32": "065372627fe34d0d1920",
    "numba-bouzidi/fp64": "840e2f65eb0833cc189e",
    "numba/fp16c/bgk": "5d7433f0d60718bd3c7b",
    "numba/fp16c/trt": "ab68a601bc357d821b49",
    "numba/fp16s/bgk": "83c9fd6b1e617c87f4cc",
    "numba/fp16s/trt": "793c43d677d458a23e0c",
    "numba/fp32/bgk": "fa9318d31615d5c13e61",
    "numba/fp32/trt": "e5852efba680ef7ba380",
    "numba/fp64/bgk": "847332abad26a56a9b42",
    "numba/fp64/trt": "1f6100a0643e7b7dfe40",
}


def _python_tokens(src: str) -> str:
    """The token stream of Python source without comments and blank lines: equal streams, equal code."""
    tokens = tokenize.generate_tokens(io.StringIO(src).readline)
    return "\x00".join(f"{tokenize.tok_name[t.type]}:{t.string}" for t in tokens
                       if t.type not in (tokenize.COMMENT, tokenize.NL))   # names: the numbers vary by Python version


def generated_sources() -> dict[str, str]:
    """Every generated source, keyed emitter/policy[/collision/variant]; Python as its token stream."""
    out = {}
    for p in HASHED:
        out[f"cuda-bouzidi/{p.name}"] = emit_cuda.bouzidi_source(p)
        out[f"numba-bouzidi/{p.name}"] = _python_tokens(emit_numba.bouzidi_source(p))
        for c in COLLISIONS:
            for cpt, bx, ip in CUDA_VARIANTS:
                out[f"cuda/{p.name}/{c}/{cpt}x{bx}/{'inplace' if ip else 'two'}"] = \
                    emit_cuda.kernel_source(p, c, cpt, bx, ip)
            for cpt, bx, pairs, ex, ip in NUMBA_VARIANTS + (PAIR_VARIANTS if p.storage_bytes == 2 else []):
                key = f"numba/{p.name}/{c}/{cpt}x{bx}/{'pairs-' + ex if pairs else ''}{'inplace' if ip else 'two'}"
                out[key] = _python_tokens(emit_numba.kernel_source(p, c, cpt, bx, pairs, ex, ip))
            for ip in (False, True):          # the characteristic outlet's variant (a reference outflow to look up)
                name = "inplace" if ip else "two"
                out[f"cuda/{p.name}/{c}/characteristic-{name}"] = emit_cuda.kernel_source(p, c, 1, 256, ip, True)
                out[f"numba/{p.name}/{c}/characteristic-{name}"] = _python_tokens(
                    emit_numba.kernel_source(p, c, 1, 128, False, "smem", ip, True))
    return out


def source_hashes() -> dict[str, str]:
    """One hash per emitter/policy[/collision] over all its variants."""
    groups: dict[str, list] = {}
    for key, text in generated_sources().items():
        emitter, *rest = key.split("/")
        groups.setdefault("/".join([emitter] + rest[:2]), []).append((key, text))
    out = {}
    for group, items in groups.items():
        h = hashlib.sha256()
        for key, text in sorted(items):
            h.update(key.encode() + b"\n" + text.encode() + b"\n")
        out[group] = h.hexdigest()[:20]
    return out


def test_generated_kernels_are_unchanged():
    assert source_hashes() == SOURCE_HASHES


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("policy", [FP32, FP16S, FP16C], ids=lambda p: p.name)
def test_cuda_register_cap_replaces_the_step_kernels_launch_bounds(policy, in_place):
    """A register cap is each step kernel's own ``__maxnreg__`` (ptxas ignores ``--maxrregcount`` for a kernel
    with launch bounds, and the two qualifiers cannot be combined): the capped source is the default one with
    every ``__launch_bounds__`` replaced, and nothing else changed. The cap's effect on the compiled kernels is
    a GPU test (``test_gpu_lbm.py::test_register_cap_reaches_the_step_kernels``)."""
    free = emit_cuda.kernel_source(policy, "trt", 1, 128, in_place)
    capped = emit_cuda.kernel_source(policy, "trt", 1, 128, in_place, max_registers=40)
    steps = 2 if in_place else (2 if policy.storage_bytes == 2 else 1)     # AA even + odd; lbm_step (+ pair)
    assert free.count("__launch_bounds__(128)") == steps and "__maxnreg__" not in free
    assert capped.count("__maxnreg__(40)") == steps and "__launch_bounds__" not in capped
    assert capped.replace("__maxnreg__(40)", "__launch_bounds__(128)") == free


def test_cuda_load_store_text():
    expected = {"fp64": ("(double)v", "(double)(v)", "double", "double"),
                "fp32": ("(float)v", "(float)(v)", "float", "float"),
                "fp16s": ("__half2float(v) * 0.00390625f", "__float2half_rn(v * 256.0f)", "float", "__half")}
    for p in POLICIES:
        code = cuda_code(p)
        assert (code.decode("v"), code.encode("v"), code.real_t, code.store_t) == expected[p.name]
        assert ("cuda_fp16.h" in code.header) == (p.storage_bytes == 2)
    # the 16-bit pair kernel widens two halves itself, then scales them; the packed store narrows itself
    assert cuda_code(FP16S).unscale("u1.x") == "u1.x * 0.00390625f"
    assert cuda_code(FP16S).scale("oa[1]") == "oa[1] * 256.0f"
    assert cuda_code(FP32).unscale("u1.x") == "u1.x" and cuda_code(FP32).scale("oa[1]") == "oa[1]"


def test_numba_load_store_text():
    expected = {"fp64": ("A[k]", "p"), "fp32": ("A[k]", "p"), "fp16s": ("CT(A[k]) * INV_SCALE", "p * SCALE")}
    for p in POLICIES:
        code = numba_code(p)
        assert (code.decode("A[k]"), code.encode("p")) == expected[p.name]
        ns = code.namespace()
        ct = np.dtype(p.compute).type
        assert ns["CT"] is ct and type(ns["SCALE"]) is ct and type(ns["INV_SCALE"]) is ct
        assert ns["SCALE"] == p.population_scale and ns["INV_SCALE"] == ct(1.0 / p.population_scale)


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
def test_numba_expressions_compute_the_policy_bits(policy):
    """The Numba load and store, evaluated on NumPy scalars with their namespace, give the bits of
    Precision.decode / encode (the host side): every float16 for fp16s, random values otherwise."""
    code = numba_code(policy)
    ns = code.namespace()
    storage, compute = np.dtype(policy.storage), np.dtype(policy.compute)
    if storage.itemsize == 2:
        g = np.arange(2**16, dtype=np.uint16).view(np.float16)
        g = g[np.isfinite(g)]
    else:
        g = (np.random.default_rng(1).standard_normal(4096) * 1e-2).astype(storage)
    host = policy.decode(g)
    h_kernel = np.array([eval(code.decode("A[k]"), ns, {"A": g, "k": k}) for k in range(g.size)], dtype=compute)
    assert h_kernel.tobytes() == host.tobytes()
    stored = np.array([eval(code.encode("h"), ns, {"h": v}) for v in host], dtype=compute).astype(storage)
    assert stored.tobytes() == policy.encode(host).tobytes()


if __name__ == "__main__":
    for name, value in sorted(source_hashes().items()):
        print(f'    "{name}": "{value}",')
