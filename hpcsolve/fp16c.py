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
"""

from __future__ import annotations

import functools

import numpy as np

from hpcsolve.backends import get_array_module

BIAS = 15
MANTISSA_BITS = 11
NAN_BITS = 0x7FFF           # |code| of NaN (and of everything too large)
MAX_FINITE = 1 + 2046 / 2048           # e = 15, m = 2046 (exact in float32)
MIN_NORMAL = 2.0 ** (1 - BIAS)
SUBNORMAL_STEP = 2.0 ** (1 - BIAS - MANTISSA_BITS)     # 2^-25
_REBIAS = (127 - BIAS) << 23                            # float32 exponent bias - FP16C bias, in place


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


def is_nan(c):
    """True where a code is NaN (what ``encode`` gives for NaN, infinities and overflow)."""
    xp = get_array_module(c)
    return (xp.asarray(c) & 0x7FFF) == 0x7FFF


#: CUDA C device functions, the same integer arithmetic on the float32 bits (``__float_as_uint``)
CUDA_SOURCE = r"""
__device__ __forceinline__ float fp16c_decode(const unsigned short c) {
  const unsigned int u = c, e = (u >> 11) & 0xFu, m = u & 0x7FFu, s = (u & 0x8000u) << 16;
  if ((u & 0x7FFFu) == 0x7FFFu) return __uint_as_float(0x7FC00000u | s);
  if (e == 0u) { const float v = (float)m * 2.98023223876953125e-08f; return s ? -v : v; }
  return __uint_as_float(s | ((e + 112u) << 23) | (m << 12));
}
__device__ __forceinline__ unsigned short fp16c_encode(const float x) {
  const unsigned int b = __float_as_uint(x), s = (b >> 16) & 0x8000u, a = b & 0x7FFFFFFFu, e32 = a >> 23;
  unsigned int mag;
  if (a > 0x7F800000u) mag = 0x7FFFu;
  else if (e32 >= 113u) {
    const unsigned long long n = ((unsigned long long)(a - (112u << 23)) + 0x7FFu + ((a >> 12) & 1u)) >> 12;
    mag = n > 0x7FFFull ? 0x7FFFu : (unsigned int)n;
  } else if (e32 >= 101u) {
    const unsigned int shift = 125u - e32, sig = (a & 0x7FFFFFu) | 0x800000u;
    unsigned int q = sig >> shift;
    const unsigned int rem = sig & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    q += (rem > half) || (rem == half && (q & 1u));
    mag = q;
  } else mag = 0u;
  return (unsigned short)(s | mag);
}
"""


@functools.lru_cache(maxsize=None)
def numba_functions():
    """(fp16c_decode, fp16c_encode) for Numba-CUDA kernels: device functions doing the integer arithmetic of
    ``CUDA_SOURCE`` on the float32 bits (LLVM bitcasts); under the CUDA simulator, this module's NumPy
    functions on scalars."""
    from hpcsolve.backends import cuda_simulator_enabled

    if cuda_simulator_enabled():
        def fp16c_decode(c):
            return np.float32(decode(np.asarray(c, dtype=np.uint16))[()])

        def fp16c_encode(x):
            return np.uint16(encode(np.asarray(x, dtype=np.float32))[()])

        return fp16c_decode, fp16c_encode

    from llvmlite import ir
    from numba import cuda, float32, types, uint16, uint64
    from numba.cuda.extending import intrinsic

    @intrinsic
    def f32_bits(typingctx, x):
        if not isinstance(x, types.Float):
            return None

        def codegen(context, builder, sig, args):
            v = args[0]
            if sig.args[0].bitwidth != 32:
                v = builder.fptrunc(v, ir.FloatType())
            return builder.zext(builder.bitcast(v, ir.IntType(32)), ir.IntType(64))
        return types.uint64(x), codegen

    @intrinsic
    def bits_f32(typingctx, u):
        if not isinstance(u, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())
        return types.float32(u), codegen

    @cuda.jit(device=True, inline=True)
    def fp16c_decode(c):
        u = uint64(c)
        e = (u >> uint64(11)) & uint64(0xF)
        m = u & uint64(0x7FF)
        s = (u & uint64(0x8000)) << uint64(16)
        if (u & uint64(0x7FFF)) == uint64(0x7FFF):
            return bits_f32(uint64(0x7FC00000) | s)
        if e == uint64(0):
            v = float32(m) * float32(2.98023223876953125e-08)
            if s != uint64(0):
                return -v
            return v
        return bits_f32(s | ((e + uint64(112)) << uint64(23)) | (m << uint64(12)))

    @cuda.jit(device=True, inline=True)
    def fp16c_encode(x):
        b = f32_bits(x)
        s = (b >> uint64(16)) & uint64(0x8000)
        a = b & uint64(0x7FFFFFFF)
        e32 = a >> uint64(23)
        mag = uint64(0)
        if a > uint64(0x7F800000):
            mag = uint64(0x7FFF)
        elif e32 >= uint64(113):
            n = ((a - uint64(112 << 23)) + uint64(0x7FF) + ((a >> uint64(12)) & uint64(1))) >> uint64(12)
            mag = n if n < uint64(0x7FFF) else uint64(0x7FFF)
        elif e32 >= uint64(101):
            shift = uint64(125) - e32
            sig = (a & uint64(0x7FFFFF)) | uint64(0x800000)
            q = sig >> shift
            rem = sig & ((uint64(1) << shift) - uint64(1))
            half = uint64(1) << (shift - uint64(1))
            if rem > half or (rem == half and (q & uint64(1)) == uint64(1)):
                q += uint64(1)
            mag = q
        return uint16(s | mag)

    return fp16c_decode, fp16c_encode
