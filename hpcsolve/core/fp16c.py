"""FP16C: a 16-bit floating-point storage format for LBM populations (after Lehmann et al., 2022, "FP16C").

Bits ``s eeee mmmmmmmmmmm``: 1 sign, 4 exponent (bias 15), 11 mantissa bits, one more mantissa bit than IEEE
float16 and a range fitted to shifted populations h = f - w (|h| < 1 in any stable run):

- e = 1..15: (-1)^s (1 + m / 2^11) 2^(e - 15), from 2^-14 = 6.1e-5 to 1.99902 (e = 15, m = 2046);
- e = 0: (-1)^s m 2^-25, subnormal, spacing 3.0e-8;
- e = 15, m = 2047: NaN. Encoding rounds to nearest, ties to even; a NaN, an infinity and every value that
  rounds past the largest finite one encode as NaN, so that a blown-up state stays detectable.

Every value is exact in float32, and the conversion from float32 is integer arithmetic on the float32 bits,
so the NumPy reference here, the CUDA C of ``CUDA_SOURCE`` and the Numba device functions of
``numba_functions`` give the same bits. The NumPy reference is written by hand (vectorised, chunked); the device
codec is written once, as functions of the scalar IR of hpcsolve/core/scalar_ir.py (``WIDEN``, ``DECODE``,
``ENCODE``, ``SCALED_SR``, ``ENCODE_SR``, ``SEED``, the pair words' ``LOW``, ``HIGH``, ``PACK``, ``PACK_SR``), and
printed twice: as CUDA C (``CUDA_SOURCE``, ``CUDA_PAIR_SOURCE``) and as LLVM IR in Numba intrinsics. Tests compare
the device codec's both printings with the reference, bit for bit.

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
drift (docs/design/lbm_algorithm.md).
"""

from __future__ import annotations

import functools

import numpy as np

from hpcsolve.core import scalar_ir as ir
from hpcsolve.core.backends import cuda_simulator_enabled, get_array_module

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


# ---- the device codec: one description of the bit recipe (hpcsolve/core/scalar_ir.py), printed as CUDA C
# (CUDA_SOURCE, CUDA_PAIR_SOURCE) and as LLVM IR for Numba (numba_functions, ...), operation for operation
#
# Branch-free (a step converts 18 values per cell, and both the fp16c and the fp16s step are bound by instruction
# issue on the H200, so every instruction of the codec shows in the throughput):
# - ``fp16c_mul``: an IEEE float32 product, subnormal results and operands kept. CuPy compiles kernels with
#   flush-to-zero (``-ftz=true`` appended to the options; it flushed an earlier decode's subnormals to 0), which does
#   not reach inline PTX: ``mul.rn.f32`` without ``.ftz``; LLVM: an fmul without fast-math flags;
# - decode: the code sign-extended and shifted so that its sign is float32's and its 15 magnitude bits sit under
#   the float32 exponent and mantissa (e = 0: a float32 subnormal), times 2^112: the value, exactly (3-4
#   instructions); the NaN code reads MAX_CODE_VALUE there and is replaced by NaN;
# - encode (round to nearest, ties to even; not in the step's hot path), |x| >= 2^-14: drop 12 mantissa bits (a
#   carry moves into the exponent), re-bias, and clamp everything past the largest finite value (infinities and
#   NaN too) to the NaN code; |x| < 2^-14: m = |x| 2^25 (exact) rounded to nearest even by the float32 addition of
#   2^23, whose low mantissa bits it is;
# - stochastic encode (the step's stores): the bits of |x| 2^-112 by ``fp16c_mul``, capped at those of
#   MAX_CODE_VALUE 2^-112 (unsigned min: NaN of any kind and infinities take the cap), plus the top 12 bits of the
#   random word, shifted down 12, and the sign of x. The pair kernel's ``fp16c_pack_sr`` puts the second code in
#   the high half without a separate shift.
_MUL_C = """#ifdef __CUDA_ARCH__
  float r; asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b)); return r;
#else
  return a * b;
#endif
"""
_F, _U = "f32", "u32"
MUL = ir.Fn("fp16c_mul", _F, (("a", _F), ("b", _F)), c_body=_MUL_C, llvm=lambda b, x, y: b.fmul(x, y))
_MAX_CODE_SCALED = ir.u32(_MAX_CODE_BITS - _REBIAS, "0x07FFF000u")     # bits of MAX_CODE_VALUE 2^-112


def _widen_body():
    t = ir.var("t", _U)
    decl, v = ir.let("v", MUL(ir.as_float(t & 0x87FFF000), ir.f32(2.0 ** 112, "0x1p112f")))
    nan = ir.as_float(ir.u32(0x7FC00000))
    return (decl,), (ir.Return(ir.select(ir.fabs(v).eq(ir.f32(MAX_CODE_VALUE, "1.99951171875f")), nan, v)),)


WIDEN = ir.Fn("fp16c_widen", _F, (("t", _U),), _widen_body(), comment="the value of a code whose sign is at bit 31 "
              "and magnitude at bits 26..12 of t (other bits ignored)")
DECODE = ir.Fn("fp16c_decode", _F, (("c", "u16"),),
               ((ir.Return(WIDEN(ir.cast(_U, ir.cast("i32", ir.cast("i16", ir.var("c", "u16"))) << 12))),),))


def _encode_body():
    x = ir.var("x", _F)
    b = ir.var("b", _U)
    a = ir.var("a", _U)
    n_decl, n = ir.let("n", ir.umin((a - (ir.u32(112, "112u") << 23) + 0x7FF + ((a >> 12) & 1)) >> 12, 0x7FFF))
    q_decl, q = ir.let("q", ir.as_uint(ir.as_float(a) * ir.f32(2.0 ** 25, "0x1p25f") + ir.f32(2.0 ** 23, "8388608.0f"))
                       & 0x7FFFFF)
    mag = ir.select(a.ge(ir.u32(113, "113u") << 23), n, q)
    return ((ir.Lets(_U, ("b", "a"), (ir.as_uint(x), b & 0x7FFFFFFF)),), (n_decl,), (q_decl,),
            (ir.Return(ir.cast("u16", ((b >> 16) & 0x8000) | mag)),))


ENCODE = ir.Fn("fp16c_encode", "u16", (("x", _F),), _encode_body())
_SR_X, _SR_R = ir.var("x", _F), ir.var("r", _U)
SCALED_SR = ir.Fn("fp16c_scaled_sr", _U, (("x", _F), ("r", _U)), (
    (ir.Return(ir.umin(ir.as_uint(MUL(ir.fabs(_SR_X), ir.f32(2.0 ** -112, "0x1p-112f"))), _MAX_CODE_SCALED)
               + (_SR_R >> 20)),),),
    comment="stochastic rounding (fp16c.encode_stochastic): the magnitude bits of y = |x| 2^-112, at most those of\n"
            "MAX_CODE_VALUE 2^-112 (NaN and infinities too: an unsigned min of the bits), plus the top 12 bits of the "
            "random\nword r, before the shift that drops 12 bits")
ENCODE_SR = ir.Fn("fp16c_encode_sr", "u16", (("x", _F), ("r", _U)), (
    (ir.Return(ir.cast("u16", (SCALED_SR(_SR_X, _SR_R) >> 12) | ((ir.as_uint(_SR_X) >> 16) & 0x8000))),),))


def _seed_body():
    h = ir.var("h", _U)
    mix = [ir.Update("h", "^", h >> 16), ir.Update("h", "*", ir.u32(0x7FEB352D)), ir.Update("h", "^", h >> 15),
           ir.Update("h", "*", ir.u32(0x846CA68B)), ir.Update("h", "^", h >> 16)]
    first = ir.Var("h", _U, ir.as_uint(ir.var("h0", _F)) ^ (ir.var("cell", _U) * SEED_MULT))
    return (first,), tuple(mix), (ir.Return(h),)


SEED = ir.Fn("fp16c_seed", _U, (("h0", _F), ("cell", _U)), _seed_body(),
             comment="the seed of a cell (fp16c.seed): its pre-collision rest population's bits and its flat index")

# the pair kernel's words of two codes (the even cell in the low half)
_W = ir.var("w", _U)
LOW = ir.Fn("fp16c_low", _F, (("w", _U),), ((ir.Return(WIDEN(ir.cast(_U, ir.cast("i32", _W << 16) >> 4))),),),
            one_line=True)
HIGH = ir.Fn("fp16c_high", _F, (("w", _U),), ((ir.Return(WIDEN(ir.cast(_U, ir.cast("i32", _W) >> 4))),),),
             one_line=True)
_PA, _PB = ir.var("a", _F), ir.var("b", _F)
PACK = ir.Fn("fp16c_pack", _U, (("a", _F), ("b", _F)),
             ((ir.Return(ir.cast(_U, ENCODE(_PA)) | (ir.cast(_U, ENCODE(_PB)) << 16)),),))
PACK_SR = ir.Fn("fp16c_pack_sr", _U, (("a", _F), ("b", _F), ("ra", _U), ("rb", _U)), ((ir.Return(
    ir.cast(_U, ENCODE_SR(_PA, ir.var("ra", _U))) | ((SCALED_SR(_PB, ir.var("rb", _U)) << 4) & 0x7FFF0000)
    | (ir.as_uint(_PB) & 0x80000000)),),),
    comment="the low code as fp16c_encode_sr; the high one shifted into place directly (bits 30..16: its magnitude, "
            "31: sign)")

#: CUDA C device functions giving the bits of ``decode`` / ``encode`` / ``encode_stochastic`` / ``seed``
CUDA_SOURCE = "\n" + ir.c_source((MUL, WIDEN, DECODE, ENCODE, SCALED_SR, ENCODE_SR, SEED))
#: the pair kernel's word functions (after CUDA_SOURCE): ``fp16c_low`` / ``fp16c_high`` widen a half,
#: ``fp16c_pack`` / ``fp16c_pack_sr`` encode two values into a word
CUDA_PAIR_SOURCE = "\n" + ir.c_source((LOW, HIGH, PACK, PACK_SR))[:-1]


def random_word(i: int, s: ir.Scalar) -> ir.Scalar:
    """The random word a_i s + c_i of direction ``i`` (``STREAM``) from the seed ``s``."""
    a, c = STREAM[i]
    return ir.u32(a, f"{a:#x}u") * s + ir.u32(c, f"{c:#x}u")


def cuda_random_word(i: int, seed: str) -> str:
    """C of direction ``i``'s random word from the seed expression ``seed``."""
    return ir.c_expr(random_word(i, ir.var(seed, _U)))


# ---- LLVM IR (llvmlite builders) of the device functions, used by the intrinsics below and the host tests
def _decode_ir(builder, u, shift=16):
    """``fp16c_decode`` of the code in bits ``shift`` - 16 .. ``shift`` - 1 of the i32 ``u`` (16: the low half,
    32: the high half of a word; other bits ignored)."""
    return ir.llvm_call(LOW if shift < 32 else HIGH, builder, [u])


def _encode_ir(builder, v, r=None):
    """``fp16c_encode`` of the float ``v`` in the low 16 bits of an i32; with a random i32 word ``r``,
    ``fp16c_encode_sr`` (stochastic rounding)."""
    code = ir.llvm_call(ENCODE, builder, [v]) if r is None else ir.llvm_call(ENCODE_SR, builder, [v, r])
    return builder.zext(code, ir.llvm_type(_U))


def _pack_sr_ir(builder, a, b, ra, rb):
    return ir.llvm_call(PACK_SR, builder, [a, b, ra, rb])


def _seed_ir(builder, h0, cell):
    return ir.llvm_call(SEED, builder, [h0, cell])


def _word_ir(builder, s, i):
    """The random word of direction ``i`` from the i32 seed ``s``."""
    return ir.llvm_expr(builder, random_word(i, ir.var("s", _U)), {"s": s})


def _convert(builder, value, numba_type, ty):
    """A Numba argument ``value`` as the LLVM value of the IR type ``ty`` (float: fptrunc; integer: zext / trunc)."""
    if ty == _F:
        return builder.fptrunc(value, ir.llvm_type(_F)) if numba_type.bitwidth != 32 else value
    src, dst = numba_type.bitwidth, ir.BITS[ty]
    if src < dst:
        return builder.zext(value, ir.llvm_type(ty))
    return builder.trunc(value, ir.llvm_type(ty)) if src > dst else value


def _intrinsic(ret, tys, emit):
    """A Numba-CUDA intrinsic of the arguments of IR types ``tys`` (Float / Integer Numba types) returning the
    Numba type ``ret``: ``emit(builder, *converted args)``."""
    from numba import types  # late: optional dependency
    from numba.cuda.extending import intrinsic  # late: optional dependency, with numba above

    def typed(args):
        if not all(isinstance(a, types.Float if t == _F else types.Integer) for a, t in zip(args, tys)):
            return None

        def codegen(context, builder, sig, llargs):
            return emit(builder, *[_convert(builder, v, t, ty) for v, t, ty in zip(llargs, args, tys)])
        return ret(*args), codegen

    # (Numba's intrinsics take no *args: one typer per arity)
    typer = {1: lambda typingctx, a: typed((a,)), 2: lambda typingctx, a, b: typed((a, b)),
             4: lambda typingctx, a, b, c, d: typed((a, b, c, d))}[len(tys)]
    typer.__name__ = f"fp16c_{emit.__name__}"
    return intrinsic(typer)


def _fn_intrinsic(ret, fn):
    def emit(builder, *args):
        return ir.llvm_call(fn, builder, list(args))
    emit.__name__ = fn.name
    return _intrinsic(ret, tuple(t for _, t in fn.params), emit)


@functools.lru_cache(maxsize=None)
def numba_functions():
    """(fp16c_decode, fp16c_encode) for Numba-CUDA kernels: intrinsics emitting the 32-bit arithmetic of
    ``CUDA_SOURCE`` as LLVM IR (Numba's own integer arithmetic widens to 64 bits); under the CUDA simulator,
    this module's NumPy functions on scalars."""

    if cuda_simulator_enabled():
        def fp16c_decode(c):
            return np.float32(decode(np.asarray(c, dtype=np.uint16))[()])

        def fp16c_encode(x):
            return np.uint16(encode(np.asarray(x, dtype=np.float32))[()])

        return fp16c_decode, fp16c_encode
    from numba import types  # late: optional dependency

    return _fn_intrinsic(types.float32, DECODE), _fn_intrinsic(types.uint16, ENCODE)


@functools.lru_cache(maxsize=None)
def numba_pair_functions():
    """(lo, hi, pack) for the Numba two-cells-per-thread kernel on 32-bit words of two codes (the even cell in
    the low half): ``lo(w)`` / ``hi(w)`` decode a half to float32, ``pack(a, b)`` encodes two values into an
    int32 word. Intrinsics on the GPU, NumPy under the CUDA simulator."""

    if cuda_simulator_enabled():
        def lo(w):
            return np.float32(decode(np.uint16(int(w) & 0xFFFF))[()])

        def hi(w):
            return np.float32(decode(np.uint16((int(w) >> 16) & 0xFFFF))[()])

        def pack(a, b):
            bits = encode(np.array([a, b], dtype=np.float32)).astype(np.uint32)
            return np.array(bits[0] | (bits[1] << 16), dtype=np.uint32).view(np.int32)[()]

        return lo, hi, pack
    from numba import types  # late: optional dependency

    return (_fn_intrinsic(types.float32, LOW), _fn_intrinsic(types.float32, HIGH),
            _fn_intrinsic(types.int32, PACK))


def _simulated_stochastic_functions():
    """:func:`numba_stochastic_functions` under the CUDA simulator: NumPy on scalars."""
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


@functools.lru_cache(maxsize=None)
def numba_stochastic_functions():
    """(seed, encoders, pack_encoders) for Numba-CUDA kernels: ``seed(h0, cell)`` (uint32, :func:`seed`),
    ``encoders[i](x, s)`` the code of direction i's value x with the random word of seed s (uint16,
    :func:`encode_stochastic`), ``pack_encoders[i](a, b, sa, sb)`` two such codes in one int32 word (the even cell
    in the low half). Intrinsics of 32-bit LLVM IR on the GPU; NumPy on scalars under the CUDA simulator."""

    if cuda_simulator_enabled():
        return _simulated_stochastic_functions()
    from numba import types  # late: optional dependency

    def encoder(i):
        def enc(builder, x, s):
            return ir.llvm_call(ENCODE_SR, builder, [x, _word_ir(builder, s, i)])
        enc.__name__ = f"encode_sr{i}"
        return _intrinsic(types.uint16, (_F, _U), enc)

    def pack_encoder(i):
        def pack(builder, a, b, sa, sb):
            return ir.llvm_call(PACK_SR, builder, [a, b, _word_ir(builder, sa, i), _word_ir(builder, sb, i)])
        pack.__name__ = f"pack_sr{i}"
        return _intrinsic(types.int32, (_F, _F, _U, _U), pack)

    return (_fn_intrinsic(types.uint32, SEED), tuple(encoder(i) for i in range(9)),
            tuple(pack_encoder(i) for i in range(9)))
