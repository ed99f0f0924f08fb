"""FP16C: a 16-bit floating-point storage format for LBM populations (after Lehmann et al., 2022, "FP16C").

Bits ``s eeee mmmmmmmmmmm``: 1 sign, 4 exponent (bias 15), 11 mantissa bits, one more mantissa bit than IEEE
float16 and a range fitted to shifted populations h = f - w (|h| < 1 in any stable run):

- e = 1..15: (-1)^s (1 + m / 2^11) 2^(e - 15), from 2^-14 = 6.1e-5 to 1.99902 (e = 15, m = 2046);
- e = 0: (-1)^s m 2^-25, subnormal, spacing 3.0e-8;
- e = 15, m = 2047: NaN. Encoding rounds to nearest, ties to even; a NaN, an infinity and every value that
  rounds past the largest finite one encode as NaN, so that a blown-up state stays detectable.

Every value is exact in float32, and the conversion from float32 is integer arithmetic on the float32 bits,
so the NumPy reference here, the CUDA C of ``CUDA_SOURCE`` and the Numba device functions of
``numba_functions`` give the same bits. This module holds the one definition; tests compare the three.

**Stochastic rounding of the step's stores** (:func:`encode_stochastic`, CUDA C ``fp16c_encode_sr``, Numba
``numba_stochastic_functions``): a value rounds up with probability equal to its distance from the code below,
in units of the code step (unbiased: the expected stored value is the value), by adding 12 random bits below the
kept mantissa and truncating. It works on y = min(|x|, MAX_CODE_VALUE) 2^-112, a float32 whose bits are the
code's magnitude bits followed by 12 more (a float32 subnormal where the code is subnormal: y is rounded to
nearest on float32's subnormal grid first, 2^12 times finer than the code's, and the code then rounds
stochastically from y). The random bits are a deterministic function of the cell: :func:`seed` mixes the bits
of the cell's pre-collision
rest population (an exactly stored value, identical on every backend) with the cell's flat index, and direction i
takes the top 12 bits of ``STREAM[i] = (a_i, c_i)``: a_i s + c_i, the (i + 1)-th state of the LCG
s <- 1664525 s + 1013904223 (Numerical Recipes) from s, so no state is threaded through a kernel. With round to
nearest, the systematic part of the rounding error adds up step after step near a steady state (the cavity at
Re 1000, 256 cells: 5x fp32's distance from Ghia); stochastic rounding leaves noise of the same size without that
drift (docs/lbm_algorithm.md).
"""

from __future__ import annotations

import functools

import numpy as np

from hpcsolve.core.backends import get_array_module

BIAS = 15
MANTISSA_BITS = 11
NAN_BITS = 0x7FFF           # |code| of NaN (and of everything too large)
MAX_FINITE = 1 + 2046 / 2048           # e = 15, m = 2046 (exact in float32)
MAX_CODE_VALUE = 1 + 2047 / 2048       # what the NaN code (e = 15, m = 2047) would read: the clamp of the encoders
MIN_NORMAL = 2.0 ** (1 - BIAS)
SUBNORMAL_STEP = 2.0 ** (1 - BIAS - MANTISSA_BITS)     # 2^-25
_REBIAS = (127 - BIAS) << 23                            # float32 exponent bias - FP16C bias, in place
_MAX_CODE_BITS = int(np.float32(MAX_CODE_VALUE).view(np.uint32))


#: encode / decode work through arrays of at most this many values at a time, so that their temporaries (about
#: 33 B per value) stay bounded (140 MB) whatever the grid: the NumPy reference converts every step, CuPy at
#: monitor points and in ``perturb``
CHUNK = 1 << 22


def _chunked(fn, x, out_dtype):
    xp = get_array_module(x)
    if x.size <= CHUNK:
        return fn(x)
    out = xp.empty(x.shape, dtype=out_dtype)
    src, dst = x.reshape(-1), out.reshape(-1)
    for i in range(0, x.size, CHUNK):
        dst[i:i + CHUNK] = fn(src[i:i + CHUNK])
    return out


def encode(x):
    """FP16C codes (uint16) of ``x`` (NumPy or CuPy array, or scalar), converted to float32 first. uint32
    arithmetic throughout, CHUNK values at a time."""
    xp = get_array_module(x)
    a32 = xp.asarray(x, dtype=xp.float32)
    if not a32.flags.c_contiguous:                  # (ascontiguousarray would make a 0-d array 1-d)
        a32 = a32.copy()
    return _chunked(_encode, a32, xp.uint16)


def _encode(a32):
    xp = get_array_module(a32)
    b = a32.view(xp.uint32)
    a = b & xp.uint32(0x7FFFFFFF)                   # |x| bits
    # subnormal result: m = round(|x| 2^25) from the 24-bit significand sig = 1.mant, |x| 2^25 = sig 2^-(125 - e32);
    # shifts past 25 give 0 as 25 does (sig < 2^24), so the shift is clipped to 13..25
    shift = xp.clip(125 - (a >> 23).astype(xp.int32), 13, 25).astype(xp.uint32)
    sig = (a & xp.uint32(0x7FFFFF)) | xp.uint32(0x800000)
    q = sig >> shift
    rem = sig & ((xp.uint32(1) << shift) - xp.uint32(1))
    half = xp.uint32(1) << (shift - xp.uint32(1))
    q += ((rem > half) | ((rem == half) & ((q & xp.uint32(1)) == 1))).astype(xp.uint32)
    del rem, half, sig, shift
    q = xp.where(a >= xp.uint32(1 << 23), q, xp.uint32(0))       # float32 subnormals (< 1.2e-38) encode as 0
    # normal result (float32 exponent >= 113): drop 12 mantissa bits, round to nearest even (the carry moves into
    # the exponent), re-bias the exponent (computed from max(a, 2^-14) so that it never wraps; below, the
    # subnormal result is taken)
    an = xp.maximum(a, xp.uint32(113 << 23))
    normal = ((an - xp.uint32(_REBIAS)) + xp.uint32(0x7FF) + ((an >> 12) & xp.uint32(1))) >> 12
    del an
    mag = xp.where(a >= xp.uint32(113 << 23), xp.minimum(normal, xp.uint32(NAN_BITS)), q)
    del normal, q
    mag = xp.where(a > xp.uint32(0x7F800000), xp.uint32(NAN_BITS), mag)     # NaN; inf and overflow -> NaN above
    mag |= (b >> 16) & xp.uint32(0x8000)
    return mag.astype(xp.uint16)


def decode(c):
    """float32 values of FP16C codes ``c`` (uint16 NumPy or CuPy array, or scalar), CHUNK values at a time."""
    xp = get_array_module(c)
    c = xp.asarray(c)
    if not c.flags.c_contiguous:
        c = c.copy()
    return _chunked(_decode, c, xp.float32)


def _decode(c):
    xp = get_array_module(c)
    u = c.astype(xp.uint32)
    e = (u >> 11) & xp.uint32(0xF)
    m = u & xp.uint32(0x7FF)
    sign = (u & xp.uint32(0x8000)) << 16
    out = (sign | ((e + xp.uint32(127 - BIAS)) << 23) | (m << 12)).view(xp.float32)
    sub = m.astype(xp.float32) * xp.float32(SUBNORMAL_STEP)      # exact: m < 2^11
    sub = xp.where(sign != 0, -sub, sub)
    out = xp.where(e == 0, sub, out)
    return xp.where((u & xp.uint32(0x7FFF)) == NAN_BITS, xp.float32(np.nan), out).astype(xp.float32, copy=False)


SEED_MULT = 0x9E3779B1          # cell index multiplier of the seed (2^32 / golden ratio)
LCG_A, LCG_C = 1664525, 1013904223


def _stream(i: int) -> tuple[int, int]:
    """(a, c) with a s + c (mod 2^32) the (i + 1)-th LCG state after s."""
    a, c = 1, 0
    for _ in range(i + 1):
        a, c = (LCG_A * a) & 0xFFFFFFFF, (LCG_A * c + LCG_C) & 0xFFFFFFFF
    return a, c


#: per direction i: (a_i, c_i) of the random word a_i s + c_i of a cell with seed s
STREAM = tuple(_stream(i) for i in range(9))


def seed(h0, cell):
    """uint32 seeds of cells from their pre-collision rest population ``h0`` (float32 values, exact) and flat
    index ``cell``: lowbias32 (Wellons) of bits(h0) ^ (cell * SEED_MULT), uint32 arithmetic."""
    xp = get_array_module(h0)
    u32 = xp.uint32
    h = xp.asarray(h0, dtype=xp.float32).view(u32) ^ (xp.asarray(cell).astype(u32) * u32(SEED_MULT))
    h ^= h >> u32(16)
    h *= u32(0x7FEB352D)
    h ^= h >> u32(15)
    h *= u32(0x846CA68B)
    h ^= h >> u32(16)
    return h


def encode_stochastic(x, s):
    """FP16C codes of ``x`` (9, n) (float32 values of the 9 directions of n cells) with stochastic rounding:
    ``(bits(y) + r_i) >> 12`` with y = min(|x|, MAX_CODE_VALUE) 2^-112 (float32, IEEE: subnormal products kept,
    rounded to nearest) and r_i the top 12 bits of ``STREAM[i]`` applied to the cells' seeds ``s`` (n,)
    (:func:`seed`); the sign of x. NaN, infinities and values rounding past the largest finite code give the NaN
    code, as in :func:`encode` (NaN fails the min and takes MAX_CODE_VALUE, whose code is NaN whatever r_i)."""
    xp = get_array_module(x)
    a32 = xp.ascontiguousarray(xp.asarray(x, dtype=xp.float32))
    s = xp.asarray(s, dtype=xp.uint32)
    step = max(1, CHUNK // max(1, a32.shape[0]))               # bounded temporaries, as encode
    if a32.shape[1] <= step:
        return _encode_stochastic(a32, s)
    out = xp.empty(a32.shape, dtype=xp.uint16)
    for k in range(0, a32.shape[1], step):
        out[:, k:k + step] = _encode_stochastic(xp.ascontiguousarray(a32[:, k:k + step]), s[k:k + step])
    return out


def _encode_stochastic(a32, s):
    xp = get_array_module(a32)
    u32 = xp.uint32
    b = a32.view(u32)
    # bits of y = min(|x|, MAX_CODE_VALUE) 2^-112 in integer arithmetic (the same bits as the IEEE float32 product
    # of the kernels, whatever flush-to-zero an array library compiles with): where y is normal, the re-biased bits
    # (exact); where it is a float32 subnormal, |x| 2^37 (exact in float64) rounded to nearest even
    a = xp.minimum(b & u32(0x7FFFFFFF), u32(_MAX_CODE_BITS))          # NaN and infinities: the bound
    sub = xp.rint(xp.minimum(a, u32(113 << 23)).view(xp.float32).astype(xp.float64) * 2.0 ** 37).astype(u32)
    y = xp.where(a >= u32(113 << 23), a - u32(_REBIAS), sub)
    del a, sub
    mag = (y + xp.stack([(u32(ai) * s + u32(ci)) >> u32(20) for ai, ci in STREAM[:a32.shape[0]]])) >> u32(12)
    del y
    return (mag | ((b >> u32(16)) & u32(0x8000))).astype(xp.uint16)


def is_nan(c):
    """True where a code is NaN (what ``encode`` gives for NaN, infinities and overflow)."""
    xp = get_array_module(c)
    return (xp.asarray(c) & 0x7FFF) == 0x7FFF


#: CUDA C device functions giving the bits of ``decode`` / ``encode`` / ``encode_stochastic``, branch-free (a step
#: converts 18 values per cell, and both the fp16c and the fp16s step are bound by instruction issue on the H200, so
#: every instruction of the codec shows in the throughput):
#: - ``fp16c_mul``: an IEEE float32 product, subnormal results and operands kept. CuPy compiles kernels with
#:   flush-to-zero (``-ftz=true`` appended to the options; it flushed an earlier decode's subnormals to 0), which does
#:   not reach inline PTX: ``mul.rn.f32`` without ``.ftz``;
#: - decode: the code sign-extended and shifted so that its sign is float32's and its 15 magnitude bits sit under
#:   the float32 exponent and mantissa (e = 0: a float32 subnormal), times 2^112: the value, exactly (3-4
#:   instructions); the NaN code reads MAX_CODE_VALUE there and is replaced by NaN;
#: - encode (round to nearest, ties to even; not in the step's hot path), |x| >= 2^-14: drop 12 mantissa bits (a
#:   carry moves into the exponent), re-bias, and clamp everything past the largest finite value (infinities and
#:   NaN too) to the NaN code; |x| < 2^-14: m = |x| 2^25 (exact) rounded to nearest even by the float32 addition of
#:   2^23, whose low mantissa bits it is;
#: - stochastic encode (the step's stores): the bits of |x| 2^-112 by ``fp16c_mul``, capped at those of
#:   MAX_CODE_VALUE 2^-112 (unsigned min: NaN of any kind and infinities take the cap), plus the top 12 bits of the
#:   random word, shifted down 12, and the sign of x. The pair
#:   kernel's ``fp16c_pack_sr`` puts the second code in the high half without a separate shift.
CUDA_SOURCE = r"""
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


def _decode_ir(builder, u, shift=16):
    """LLVM IR of ``fp16c_decode`` (CUDA_SOURCE) of the code in bits ``shift`` - 16 .. ``shift`` - 1 of the i32 ``u``
    (16: the low half, 32: the high half of a word; other bits ignored): the sign-extended code shifted to bit 12,
    masked, times 2^112 (an fmul without fast-math flags: subnormals kept), the NaN code to NaN."""
    from llvmlite import ir

    i32, f32 = ir.IntType(32), ir.FloatType()
    if shift < 32:
        u = builder.shl(u, ir.Constant(i32, 32 - shift))
    t = builder.and_(builder.ashr(u, ir.Constant(i32, 4)), ir.Constant(i32, 0x87FFF000))
    v = builder.fmul(builder.bitcast(t, f32), ir.Constant(f32, 2.0 ** 112))
    # the NaN code (the value MAX_CODE_VALUE): tested on the magnitude bits (no LLVM intrinsics: NVVM takes none here)
    mag = builder.and_(t, ir.Constant(i32, 0x07FFF000))
    is_nan = builder.icmp_unsigned("==", mag, ir.Constant(i32, 0x07FFF000))
    return builder.select(is_nan, ir.Constant(f32, float("nan")), v)


def _scaled_sr_ir(builder, v, r):
    """LLVM IR of ``fp16c_scaled_sr``: bits of |v| 2^-112 capped at those of MAX_CODE_VALUE 2^-112, plus the top 12
    bits of ``r``."""
    from llvmlite import ir

    i32, f32 = ir.IntType(32), ir.FloatType()
    absv = builder.bitcast(builder.and_(builder.bitcast(v, i32), ir.Constant(i32, 0x7FFFFFFF)), f32)
    y = builder.bitcast(builder.fmul(absv, ir.Constant(f32, 2.0 ** -112)), i32)
    cap = ir.Constant(i32, _MAX_CODE_BITS - _REBIAS)
    y = builder.select(builder.icmp_unsigned("<", y, cap), y, cap)
    return builder.add(y, builder.lshr(r, ir.Constant(i32, 20)))


def _encode_ir(builder, v, r=None):
    """LLVM IR of ``fp16c_encode`` (CUDA_SOURCE) of the float ``v``: the code in the low 16 bits of an i32; with a
    random i32 word ``r``, of ``fp16c_encode_sr`` (stochastic rounding)."""
    from llvmlite import ir

    i32, f32 = ir.IntType(32), ir.FloatType()

    def c(k):
        return ir.Constant(i32, k)

    b = builder.bitcast(v, i32)
    sign = builder.and_(builder.lshr(b, c(16)), c(0x8000))
    if r is not None:
        return builder.or_(builder.lshr(_scaled_sr_ir(builder, v, r), c(12)), sign)
    a = builder.and_(b, c(0x7FFFFFFF))
    lsb = builder.and_(builder.lshr(a, c(12)), c(1))
    n = builder.lshr(builder.add(builder.add(builder.sub(a, c(112 << 23)), c(0x7FF)), lsb), c(12))
    n = builder.select(builder.icmp_unsigned(">", n, c(0x7FFF)), c(0x7FFF), n)
    t = builder.fadd(builder.fmul(builder.bitcast(a, f32), ir.Constant(f32, 2.0 ** 25)), ir.Constant(f32, 2.0 ** 23))
    q = builder.and_(builder.bitcast(t, i32), c(0x7FFFFF))
    mag = builder.select(builder.icmp_unsigned(">=", a, c(113 << 23)), n, q)
    return builder.or_(sign, mag)


def _pack_sr_ir(builder, a, b, ra, rb):
    """LLVM IR of the pair kernel's ``fp16c_pack_sr``: the stochastic codes of the floats ``a`` (low half) and ``b``
    (high half, put in place without a separate shift) with the random i32 words ``ra`` / ``rb``."""
    from llvmlite import ir

    i32 = ir.IntType(32)
    hi = builder.or_(builder.and_(builder.shl(_scaled_sr_ir(builder, b, rb), ir.Constant(i32, 4)),
                                  ir.Constant(i32, 0x7FFF0000)),
                     builder.and_(builder.bitcast(b, i32), ir.Constant(i32, 0x80000000)))
    return builder.or_(_encode_ir(builder, a, ra), hi)


def _seed_ir(builder, h0, cell):
    """LLVM IR of ``fp16c_seed``: the f32 ``h0`` and the i32 ``cell``."""
    from llvmlite import ir

    i32 = ir.IntType(32)

    def c(k):
        return ir.Constant(i32, k)

    h = builder.xor(builder.bitcast(h0, i32), builder.mul(cell, c(SEED_MULT)))
    for shift, mult in ((16, 0x7FEB352D), (15, 0x846CA68B)):
        h = builder.mul(builder.xor(h, builder.lshr(h, c(shift))), c(mult))
    return builder.xor(h, builder.lshr(h, c(16)))


def _word_ir(builder, s, i):
    """LLVM IR of the random word a_i s + c_i of direction ``i`` (``STREAM``) from the i32 seed ``s``."""
    from llvmlite import ir

    a, c = STREAM[i]
    return builder.add(builder.mul(s, ir.Constant(ir.IntType(32), a)), ir.Constant(ir.IntType(32), c))


def _to_i32(builder, value, bitwidth):
    from llvmlite import ir

    i32 = ir.IntType(32)
    if bitwidth < 32:
        return builder.zext(value, i32)
    return builder.trunc(value, i32) if bitwidth > 32 else value


def _to_f32(builder, value, bitwidth):
    from llvmlite import ir

    return builder.fptrunc(value, ir.FloatType()) if bitwidth != 32 else value


@functools.lru_cache(maxsize=None)
def numba_functions():
    """(fp16c_decode, fp16c_encode) for Numba-CUDA kernels: intrinsics emitting the 32-bit arithmetic of
    ``CUDA_SOURCE`` as LLVM IR (Numba's own integer arithmetic widens to 64 bits); under the CUDA simulator,
    this module's NumPy functions on scalars."""
    from hpcsolve.core.backends import cuda_simulator_enabled

    if cuda_simulator_enabled():
        def fp16c_decode(c):
            return np.float32(decode(np.asarray(c, dtype=np.uint16))[()])

        def fp16c_encode(x):
            return np.uint16(encode(np.asarray(x, dtype=np.float32))[()])

        return fp16c_decode, fp16c_encode

    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    @intrinsic
    def fp16c_decode(typingctx, c):
        if not isinstance(c, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            return _decode_ir(builder, _to_i32(builder, args[0], c.bitwidth))
        return types.float32(c), codegen

    @intrinsic
    def fp16c_encode(typingctx, x):
        if not isinstance(x, types.Float):
            return None

        def codegen(context, builder, sig, args):
            return builder.trunc(_encode_ir(builder, _to_f32(builder, args[0], x.bitwidth)), ir.IntType(16))
        return types.uint16(x), codegen

    return fp16c_decode, fp16c_encode


@functools.lru_cache(maxsize=None)
def numba_pair_functions():
    """(lo, hi, pack) for the Numba two-cells-per-thread kernel on 32-bit words of two codes (the even cell in
    the low half): ``lo(w)`` / ``hi(w)`` decode a half to float32, ``pack(a, b)`` encodes two values into an
    int32 word. Intrinsics on the GPU, NumPy under the CUDA simulator."""
    from hpcsolve.core.backends import cuda_simulator_enabled

    if cuda_simulator_enabled():
        def lo(w):
            return np.float32(decode(np.uint16(int(w) & 0xFFFF))[()])

        def hi(w):
            return np.float32(decode(np.uint16((int(w) >> 16) & 0xFFFF))[()])

        def pack(a, b):
            bits = encode(np.array([a, b], dtype=np.float32)).astype(np.uint32)
            return np.array(bits[0] | (bits[1] << 16), dtype=np.uint32).view(np.int32)[()]

        return lo, hi, pack

    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    def half(shift):
        @intrinsic
        def widen(typingctx, w):
            if not isinstance(w, types.Integer):
                return None

            def codegen(context, builder, sig, args):
                return _decode_ir(builder, _to_i32(builder, args[0], w.bitwidth), 16 + shift)
            return types.float32(w), codegen
        return widen

    @intrinsic
    def pack(typingctx, a, b):
        if not (isinstance(a, types.Float) and isinstance(b, types.Float)):
            return None

        def codegen(context, builder, sig, args):
            ca = _encode_ir(builder, _to_f32(builder, args[0], a.bitwidth))
            cb = _encode_ir(builder, _to_f32(builder, args[1], b.bitwidth))
            return builder.or_(ca, builder.shl(cb, ir.Constant(ir.IntType(32), 16)))
        return types.int32(a, b), codegen

    return half(0), half(16), pack


@functools.lru_cache(maxsize=None)
def numba_stochastic_functions():
    """(seed, encoders, pack_encoders) for Numba-CUDA kernels: ``seed(h0, cell)`` (uint32, :func:`seed`),
    ``encoders[i](x, s)`` the code of direction i's value x with the random word of seed s (uint16,
    :func:`encode_stochastic`), ``pack_encoders[i](a, b, sa, sb)`` two such codes in one int32 word (the even cell
    in the low half). Intrinsics of 32-bit LLVM IR on the GPU; NumPy on scalars under the CUDA simulator."""
    from hpcsolve.core.backends import cuda_simulator_enabled

    if cuda_simulator_enabled():
        def seed_sim(h0, cell):
            return np.uint32(seed(np.asarray(h0, dtype=np.float32), np.asarray(cell).astype(np.uint32))[()])

        def encoder(i):
            def enc(x, s):
                col = np.zeros((i + 1, 1), np.float32)
                col[i, 0] = x
                return np.uint16(encode_stochastic(col, np.array([s], dtype=np.uint32))[i, 0])
            return enc

        def pack_encoder(i):
            enc = encoder(i)

            def pack(a, b, sa, sb):
                bits = np.uint32(enc(a, sa)) | (np.uint32(enc(b, sb)) << np.uint32(16))
                return np.array(bits, dtype=np.uint32).view(np.int32)[()]
            return pack

        return seed_sim, tuple(encoder(i) for i in range(9)), tuple(pack_encoder(i) for i in range(9))

    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    i16 = ir.IntType(16)

    @intrinsic
    def seed_fn(typingctx, h0, cell):
        if not (isinstance(h0, types.Float) and isinstance(cell, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            return _seed_ir(builder, _to_f32(builder, args[0], h0.bitwidth), _to_i32(builder, args[1], cell.bitwidth))
        return types.uint32(h0, cell), codegen

    def encoder(i):
        @intrinsic
        def enc(typingctx, x, s):
            if not (isinstance(x, types.Float) and isinstance(s, types.Integer)):
                return None

            def codegen(context, builder, sig, args):
                r = _word_ir(builder, _to_i32(builder, args[1], s.bitwidth), i)
                return builder.trunc(_encode_ir(builder, _to_f32(builder, args[0], x.bitwidth), r), i16)
            return types.uint16(x, s), codegen
        return enc

    def pack_encoder(i):
        @intrinsic
        def pack(typingctx, a, b, sa, sb):
            if not (isinstance(a, types.Float) and isinstance(b, types.Float) and isinstance(sa, types.Integer)
                    and isinstance(sb, types.Integer)):
                return None

            def codegen(context, builder, sig, args):
                return _pack_sr_ir(builder, _to_f32(builder, args[0], a.bitwidth), _to_f32(builder, args[1], b.bitwidth),
                                   _word_ir(builder, _to_i32(builder, args[2], sa.bitwidth), i),
                                   _word_ir(builder, _to_i32(builder, args[3], sb.bitwidth), i))
            return types.int32(a, b, sa, sb), codegen
        return pack

    return seed_fn, tuple(encoder(i) for i in range(9)), tuple(pack_encoder(i) for i in range(9))
