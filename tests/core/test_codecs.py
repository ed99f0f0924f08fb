"""Storage codecs (hpcsolve/core/codecs.py) and the FP16C device codec's one description (hpcsolve/core/fp16c.py on
hpcsolve/core/scalar_ir.py): every policy's codec against the casts and the NumPy reference, the printed CUDA C
against the hand-written C it replaced (character for character), the LLVM printer's functions JIT-compiled for
the host against the NumPy reference, the Numba intrinsics compiled to PTX, and no codec-name comparison left."""

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from hpcsolve.core import codecs, fp16c
from hpcsolve.core import scalar_ir as ir
from hpcsolve.core.precision import FP16C, FP16S, FP32, FP64, MIXED, POLICIES
from hpcsolve.lbm.kernels.population_code import cuda_code, numba_code

ROOT = Path(__file__).resolve().parents[2]

#: CUDA_SOURCE as it was written by hand before the printer (hpcsolve/core/fp16c.py, 2026-12-03)
HAND_WRITTEN_C = r"""
__device__ __forceinline__ float fp16c_mul(const float a, const float b) {
#ifdef __CUDA_ARCH__
  float r; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
#else
  return a * b;
#endif
}
// the value of a code whose sign is at bit 31 and magnitude at bits 26..12 of t (other bits ignored)
__device__ __forceinline__ float fp16c_widen(const unsigned int t) {
  const float v = fp16c_mul(__uint_as_float(t & 0x87FFF000u), 0x1p112f);
  return fabsf(v) == 1.99951171875f ? __uint_as_float(0x7FC00000u) : v;
}
__device__ __forceinline__ float fp16c_decode(const unsigned short c) {
  return fp16c_widen((unsigned int)((int)(short)c << 12));
}
__device__ __forceinline__ unsigned short fp16c_encode(const float x) {
  const unsigned int b = __float_as_uint(x), a = b & 0x7FFFFFFFu;
  const unsigned int n = min((a - (112u << 23) + 0x7FFu + ((a >> 12) & 1u)) >> 12, 0x7FFFu);
  const unsigned int q = __float_as_uint(__uint_as_float(a) * 0x1p25f + 8388608.0f) & 0x7FFFFFu;
  return (unsigned short)(((b >> 16) & 0x8000u) | (a >= (113u << 23) ? n : q));
}
// stochastic rounding (fp16c.encode_stochastic): the magnitude bits of y = |x| 2^-112, at most those of
// MAX_CODE_VALUE 2^-112 (NaN and infinities too: an unsigned min of the bits), plus the top 12 bits of the random
// word r, before the shift that drops 12 bits
__device__ __forceinline__ unsigned int fp16c_scaled_sr(const float x, const unsigned int r) {
  return min(__float_as_uint(fp16c_mul(fabsf(x), 0x1p-112f)), 0x07FFF000u) + (r >> 20);
}
__device__ __forceinline__ unsigned short fp16c_encode_sr(const float x, const unsigned int r) {
  return (unsigned short)((fp16c_scaled_sr(x, r) >> 12) | ((__float_as_uint(x) >> 16) & 0x8000u));
}
// the seed of a cell (fp16c.seed): its pre-collision rest population's bits and its flat index
__device__ __forceinline__ unsigned int fp16c_seed(const float h0, const unsigned int cell) {
  unsigned int h = __float_as_uint(h0) ^ (cell * 0x9E3779B1u);
  h ^= h >> 16; h *= 0x7FEB352Du; h ^= h >> 15; h *= 0x846CA68Bu; h ^= h >> 16;
  return h;
}
"""
#: the pair kernel's FP16C word functions as they were written by hand (hpcsolve/lbm/kernels/emit_cuda.py)
HAND_WRITTEN_PAIR_C = r"""
__device__ __forceinline__ float fp16c_low(const unsigned int w) { return fp16c_widen((unsigned int)((int)(w << 16) >> 4)); }
__device__ __forceinline__ float fp16c_high(const unsigned int w) { return fp16c_widen((unsigned int)((int)w >> 4)); }
__device__ __forceinline__ unsigned int fp16c_pack(const float a, const float b) {
  return (unsigned int)fp16c_encode(a) | ((unsigned int)fp16c_encode(b) << 16);
}
// the low code as fp16c_encode_sr; the high one shifted into place directly (bits 30..16: its magnitude, 31: sign)
__device__ __forceinline__ unsigned int fp16c_pack_sr(const float a, const float b, const unsigned int ra,
                                                      const unsigned int rb) {
  return (unsigned int)fp16c_encode_sr(a, ra)
         | ((fp16c_scaled_sr(b, rb) << 4) & 0x7FFF0000u) | (__float_as_uint(b) & 0x80000000u);
}"""
CODES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)


def _samples() -> np.ndarray:
    rng = np.random.default_rng(11)
    parts = [rng.uniform(-2.1, 2.1, 4000), rng.standard_normal(4000) * 1e-3,
             np.exp(rng.uniform(np.log(1e-12), np.log(2.5), 4000)) * rng.choice([-1, 1], 4000),
             [0.0, -0.0, np.inf, -np.inf, np.nan, 1.999267578125, 1e-38, -1e-45, 2.0 ** -14]]
    bits = rng.integers(0, 1 << 32, 4000, dtype=np.uint64).astype(np.uint32).view(np.float32)   # any pattern
    return np.concatenate([np.asarray(p, dtype=np.float32) for p in parts] + [bits])


def test_the_printed_c_is_the_hand_written_c():
    assert fp16c.CUDA_SOURCE == HAND_WRITTEN_C
    assert fp16c.CUDA_PAIR_SOURCE == HAND_WRITTEN_PAIR_C
    assert codecs.FP16C.cuda_header == HAND_WRITTEN_C
    assert codecs.FP16C.cuda_pair["prelude"] == HAND_WRITTEN_PAIR_C
    # the random word of a direction, as the kernels spelled it
    a, c = fp16c.STREAM[4]
    assert fp16c.cuda_random_word(4, "rs") == f"{a:#x}u * rs + {c:#x}u"


def test_c_printer_parenthesises_as_c_reads():
    x, y = ir.var("x", "u32"), ir.var("y", "u32")
    f = ir.var("f", "f32")
    assert ir.c_expr((x - y + 3) * 2) == "(x - y + 3u) * 2u"
    assert ir.c_expr(x - (y + 3)) == "x - (y + 3u)"
    assert ir.c_expr(x * y + 5) == "x * y + 5u"
    assert ir.c_expr((x >> 3) & 1) == "(x >> 3) & 1u"
    assert ir.c_expr(x | y | (x << 4)) == "x | y | (x << 4)"
    assert ir.c_expr(ir.cast("i32", x >> 2) >> 1) == "(int)(x >> 2) >> 1"
    assert ir.c_expr(ir.select(x.ge(y << 1), x, y) | 1) == "(x >= (y << 1) ? x : y) | 1u"
    assert ir.c_expr(ir.fabs(f).eq(ir.f32(0.5, "0.5f"))) == "fabsf(f) == 0.5f"


@pytest.mark.parametrize("policy", list(POLICIES.values()), ids=list(POLICIES))
def test_every_policy_has_its_codec_object(policy):
    codec = policy.codec
    assert isinstance(codec, codecs.Codec)
    assert codec.storage == np.dtype(policy.storage) and codec.bytes == policy.storage_bytes
    assert hash(policy) == hash(dataclasses.replace(policy))       # a policy stays a cache key


def test_codecs_are_chosen_once_per_format():
    assert (FP64.codec, FP32.codec, FP16S.codec, FP16C.codec, MIXED.codec) == (
        codecs.FP64, codecs.FP32, codecs.FP16S, codecs.FP16C, codecs.FP32)
    assert [c.integer_codes for c in (codecs.FP64, codecs.FP32, codecs.FP16S, codecs.FP16C)] == [False] * 3 + [True]
    assert [c.stochastic for c in (codecs.FP64, codecs.FP32, codecs.FP16S, codecs.FP16C)] == [False] * 3 + [True]
    assert [c.cuda_pair is not None for c in (codecs.FP64, codecs.FP32, codecs.FP16S, codecs.FP16C)] == [
        False, False, True, True]
    assert codecs.FP16C.conversion_chunk == fp16c.CHUNK and codecs.FP16S.conversion_chunk == 0
    with pytest.raises(ValueError, match="stores"):
        dataclasses.replace(FP32, codec=codecs.FP16C)


def test_codec_conversions_match_the_casts_and_the_fp16c_reference():
    x = _samples()
    for codec in (codecs.FP64, codecs.FP32, codecs.FP16S):
        with np.errstate(over="ignore", invalid="ignore"):
            g = codec.encode(x)
            assert g.dtype == codec.storage and np.array_equal(g.view(np.uint8), x.astype(codec.storage).view(np.uint8))
            back = codec.decode(g, np.dtype(np.float32))
        assert np.array_equal(back.view(np.uint32), g.astype(np.float32).view(np.uint32))
        assert codec.all_finite(g[:100]) and not codec.all_finite(g)          # the samples hold NaN
    c = codecs.FP16C
    assert np.array_equal(c.encode(x), fp16c.encode(x))
    assert np.array_equal(c.decode(CODES, np.dtype(np.float32)).view(np.uint32), fp16c.decode(CODES).view(np.uint32))
    post = x[:9 * 1700].reshape(9, 1700)
    cells = np.arange(1700)
    assert np.array_equal(c.encode_step(post, post[0], cells),
                          fp16c.encode_stochastic(post, fp16c.seed(post[0], cells)))
    assert c.all_finite(c.encode(x[4000:4100])) and not c.all_finite(c.encode(x))


def test_precision_encodes_and_decodes_as_before():
    """The policies' encode / encode_step / decode, bit for bit as the recipe before the codec objects: scale in the
    compute dtype, then the cast or the FP16C functions."""
    rng = np.random.default_rng(3)
    for p in (FP64, FP32, FP16S, FP16C):
        ct = np.dtype(p.compute)
        h = (rng.standard_normal((9, 300)) * 0.02).astype(ct)
        scaled = h * ct.type(p.population_scale) if p.scaled else h
        g = p.encode(h)
        if p is FP16C:
            assert np.array_equal(g, fp16c.encode(scaled))
            want = fp16c.decode(g).astype(ct)
            assert np.array_equal(p.encode_step(h, h[0], np.arange(300)),
                                  fp16c.encode_stochastic(scaled, fp16c.seed(h[0], np.arange(300))))
        else:
            assert np.array_equal(g, scaled.astype(p.storage))
            want = g.astype(ct)
            assert np.array_equal(p.encode_step(h, h[0], np.arange(300)), g)
        if p.scaled:
            want = want * ct.type(1.0 / p.population_scale)
        assert np.array_equal(p.decode(g), want)


def test_population_code_asks_the_codec():
    c16, cc = cuda_code(FP16S), cuda_code(FP16C)
    assert (c16.store_t, cc.store_t, cuda_code(FP32).store_t, cuda_code(FP64).store_t) == (
        "__half", "unsigned short", "float", "double")
    assert c16.header == "#include <cuda_fp16.h>\n" and cc.header == fp16c.CUDA_SOURCE
    assert c16.pair_words["word"] == "__half2" and cc.pair_words["word"] == "unsigned int"
    assert cuda_code(FP32).pair_words is None
    a, c = fp16c.STREAM[2]
    assert cc.encode_step("v", 2, "rs") == f"fp16c_encode_sr(v, {a:#x}u * rs + {c:#x}u)"
    assert cc.pack_step("p", "q", 2, "sa", "sb") == (
        f"fp16c_pack_sr(p, q, {a:#x}u * sa + {c:#x}u, {a:#x}u * sb + {c:#x}u)")
    assert c16.encode_step("v", 2, "rs") == "__float2half_rn(v * 256.0f)" and c16.seed("rs", "h", "k") == ""
    n = numba_code(FP16C)
    assert n.encode_step("v", 3, "s") == "FP16C_ENCODE_SR3(v, s)" and n.pack_step("a", "b", 3, "s", "t") == (
        "FP16C_PACK_SR3(a, b, s, t)")
    assert numba_code(FP16S).decode("A[k]") == "CT(A[k]) * INV_SCALE" and numba_code(FP32).decode("A[k]") == "A[k]"


def test_population_code_has_no_codec_name_left():
    """The emitters ask the codec's pieces (``pair_words``, ``pack_step``, ``integer_codes``); the transitional
    name-keyed ``code.codec`` is gone, and a codec equals another codec only, never its name."""
    assert not hasattr(cuda_code(FP16C), "codec") and not hasattr(numba_code(FP16C), "codec")
    assert cuda_code(FP16C).pair_words is not None and cuda_code(FP16S).pair_words is not None
    assert cuda_code(FP32).pair_words is None
    assert numba_code(FP16C).integer_codes and not numba_code(FP16S).integer_codes
    assert FP16C.codec != "fp16c" and FP16C.codec == FP16C.codec


def test_lbm_memory_counts_the_chunked_codec_temporaries():
    from hpcsolve.lbm import memory

    cells = 1000
    fp32 = memory.lbm_numpy_step_bytes(FP32, cells)
    assert fp32 == int((2 * 9 * 4 + 9 * memory.GATHER_BYTES + memory.STEP_TEMPORARIES * 9 * 4
                        + memory.SETUP_BYTES_PER_CELL) * cells)
    extra = memory.lbm_numpy_step_bytes(FP16C, cells) - memory.lbm_numpy_step_bytes(FP16S, cells)
    assert extra == 9 * cells * memory.CODEC_TEMPORARY_BYTES


def _host_functions(bodies):
    """``bodies`` {name: (param IR types, emit(builder, *args) -> value)} JIT-compiled for this CPU (llvmlite): ctypes
    functions of 32-bit values (floats cross as their bits; 16-bit values zero-extended)."""
    import ctypes

    llvm = pytest.importorskip("llvmlite.binding")
    from llvmlite import ir as lir

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    module = lir.Module(name="codec_host")
    i32 = lir.IntType(32)
    for name, (tys, emit) in bodies.items():
        fn = lir.Function(module, lir.FunctionType(i32, [i32] * len(tys)), name=name)
        b = lir.IRBuilder(fn.append_basic_block())
        args = [b.bitcast(a, lir.FloatType()) if t == "f32" else
                (b.trunc(a, lir.IntType(16)) if ir.BITS[t] == 16 else a) for a, t in zip(fn.args, tys)]
        v = emit(b, *args)
        v = b.bitcast(v, i32) if isinstance(v.type, lir.FloatType) else (b.zext(v, i32) if v.type.width < 32 else v)
        b.ret(v)
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    engine = llvm.create_mcjit_compiler(parsed, llvm.Target.from_default_triple().create_target_machine())
    engine.finalize_object()
    u32 = ctypes.c_uint32
    return engine, {name: ctypes.CFUNCTYPE(u32, *[u32] * len(tys))(engine.get_function_address(name))
                    for name, (tys, _) in bodies.items()}


def _fn(fn):
    return tuple(t for _, t in fn.params), lambda b, *a: ir.llvm_call(fn, b, list(a))


def test_llvm_printer_functions_give_the_reference_bits():
    """DECODE (a 16-bit code: sign extension), ENCODE, PACK (two codes in a word) and the random word as the LLVM
    printer emits them for the Numba intrinsics, compiled for the host, against the NumPy reference."""
    engine, f = _host_functions({"dec": _fn(fp16c.DECODE), "enc": _fn(fp16c.ENCODE), "pack": _fn(fp16c.PACK),
                                 "word5": (("u32",), lambda b, s: fp16c._word_ir(b, s, 5))})
    dec = fp16c.decode(CODES).view(np.uint32)
    assert np.array_equal(np.array([f["dec"](int(c)) for c in CODES], np.uint32), dec)
    x = _samples()[::4]
    bits = [int(b) for b in x.view(np.uint32)]
    codes = fp16c.encode(x)
    assert np.array_equal(np.array([f["enc"](b) for b in bits], np.uint16), codes)
    packed = np.array([f["pack"](b, c) for b, c in zip(bits, bits[::-1])], np.uint32)
    assert np.array_equal(packed & 0xFFFF, codes) and np.array_equal(packed >> 16, codes[::-1])
    a, c = fp16c.STREAM[5]
    seeds = [0, 1, 0xFFFFFFFF, 0x12345678]
    assert [f["word5"](s) for s in seeds] == [(a * s + c) & 0xFFFFFFFF for s in seeds]


def test_numba_intrinsics_compile_to_ptx():
    """Every FP16C and float16 pair intrinsic typed and lowered by Numba-CUDA and compiled by NVVM (no GPU needed);
    the FP16C multiplications stay IEEE (no .ftz)."""
    cuda = pytest.importorskip("numba.cuda")
    from hpcsolve.core.backends import cuda_simulator_enabled

    if cuda_simulator_enabled():
        pytest.skip("the simulator compiles nothing")
    from numba import types

    try:
        dec, enc = fp16c.numba_functions()
        lo, hi, pack = fp16c.numba_pair_functions()
        seed, encs, packs = fp16c.numba_stochastic_functions()
        hl, hh, hp = codecs.half_pair_functions()
    except Exception as e:         # no llvmlite / numba-cuda extension API
        pytest.skip(f"no Numba-CUDA intrinsics: {e}")
    enc4, pack3 = encs[4], packs[3]

    def kernel(c, x, w, out, outc, outw):
        i = cuda.grid(1)
        out[i] = dec(c[i]) + lo(w[i]) + hi(w[i]) + hl(w[i]) + hh(w[i])
        s = seed(x[i], i)
        outw[i] = pack(x[i], x[i]) + pack3(x[i], x[i], s, s) + hp(x[i], x[i])
        outc[i] = enc4(x[i], s) + enc(x[i])

    sig = (types.uint16[:], types.float32[:], types.int32[:], types.float32[:], types.uint16[:], types.int32[:])
    try:
        ptx, _ = cuda.compile_ptx(kernel, sig, cc=(9, 0))
    except Exception as e:          # no NVVM here
        if "NVVM" not in str(e) and "nvvm" not in str(e) and "libdevice" not in str(e):
            raise
        pytest.skip(f"no NVVM: {e}")
    assert "mul.f32" in ptx and "mul.ftz" not in ptx and "mul.rn.ftz" not in ptx


OWNED = ["hpcsolve/core/codecs.py", "hpcsolve/core/fp16c.py", "hpcsolve/core/precision.py",
         "hpcsolve/core/scalar_ir.py", "hpcsolve/lbm/kernels/population_code.py", "hpcsolve/lbm/memory.py",
         "hpcsolve/lbm/steppers/kernels_numba.py"]


@pytest.mark.parametrize("path", OWNED)
def test_no_codec_name_comparisons_in_the_codec_modules(path):
    """No comparison with a storage format's name, no lookup by it (``codec == "fp16c"``, ``table["fp16c"]``)."""
    names = {name for name in POLICIES}
    tree = ast.parse((ROOT / path).read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Constant) and s.value in names for s in sides):
                found.append(node.lineno)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in names:
            found.append(node.lineno)
    assert found == []


@pytest.mark.cudasim
def test_simulator_device_functions_give_the_reference_bits():
    """Under the CUDA simulator the codecs' Numba pieces are NumPy on scalars: the same bits as the reference."""
    lo, hi, pack = codecs.FP16C.numba_pair_functions()
    x = _samples()[:200]
    codes = fp16c.encode(x)
    for k in range(0, 200, 2):
        w = int(pack(x[k], x[k + 1])) & 0xFFFFFFFF
        assert w == int(codes[k]) | (int(codes[k + 1]) << 16)
        assert np.float32(lo(w)).view(np.uint32) == fp16c.decode(codes[k]).view(np.uint32) or np.isnan(lo(w))
        assert np.float32(hi(w)).view(np.uint32) == fp16c.decode(codes[k + 1]).view(np.uint32) or np.isnan(hi(w))
    hl, hh, hp = codecs.FP16S.numba_pair_functions()
    w = int(hp(np.float32(0.5), np.float32(-1.25))) & 0xFFFFFFFF
    assert (hl(w), hh(w)) == (0.5, -1.25)
    ns = codecs.FP16C.numba_namespace()
    assert {"FP16C_DECODE", "FP16C_ENCODE", "FP16C_SEED", "FP16C_ENCODE_SR8", "FP16C_PACK_SR0"} <= set(ns)
    s = ns["FP16C_SEED"](x[0], 7)
    assert s == fp16c.seed(x[:1], np.array([7]))[0]
