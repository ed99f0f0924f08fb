"""Storage codecs: how the values of a precision policy are stored, one object per storage format.

A :class:`Codec` converts between the compute dtype and the stored bits (NumPy or CuPy arrays) and hands the kernel
emitters and steppers its pieces (load / store text, device functions, the 16-bit pair words), so that no code
outside this module asks which format it has. The precision chooses its codec once
(``hpcsolve.core.precision``: ``policy.codec``); the population scale stays the policy's (it multiplies in the
compute dtype before :meth:`Codec.encode` and after :meth:`Codec.decode`).

- :data:`FP64`, :data:`FP32`: the plain floats, a cast each way;
- :data:`FP16S`: IEEE float16 storage (``__half`` in CUDA C), a cast rounding to nearest; the pair kernels' words
  of two halves (``__half2``; Numba: :func:`half_pair_functions`);
- :data:`FP16C`: the 16-bit FP16C format of hpcsolve/core/fp16c.py (integer codes: decoded before any float
  test), with stochastic rounding of the step's stores.
"""

from __future__ import annotations

import functools

import numpy as np

from hpcsolve.core import backends, fp16c


class Codec:
    """A plain float storage format: a cast to the storage dtype and back. Subclasses override what differs."""

    #: stored values are integer codes of a custom format (not floats): finiteness and values need :meth:`decode`
    integer_codes = False
    #: the step's stores round stochastically (:meth:`encode_step` differs from :meth:`encode`)
    stochastic = False
    #: values per chunk of a host conversion with temporaries (hpcsolve.lbm.memory); 0: a plain cast
    conversion_chunk = 0

    def __init__(self, name: str, storage, c_type: str, description: str = ""):
        self.name, self.storage, self.c_type, self.description = name, np.dtype(storage), c_type, description

    # ---- identity: by name (a policy is a cache key)
    def __eq__(self, other) -> bool:
        if isinstance(other, Codec):
            return self.name == other.name
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"<codec {self.name}: {self.storage.name}>"

    def __str__(self) -> str:
        return self.name

    @property
    def bytes(self) -> int:
        """Bytes of one stored value."""
        return self.storage.itemsize

    # ---- host arrays (NumPy or CuPy)
    def encode(self, x):
        """Stored values of ``x`` (compute dtype, already scaled)."""
        return x.astype(self.storage)

    def encode_step(self, post, h0, cells):
        """Stored values of a step's post-collision values ``post`` (9, n) of the cells ``cells`` (flat indices), whose
        pre-collision rest populations are ``h0`` (exact, decoded): as :meth:`encode` unless :attr:`stochastic`."""
        return self.encode(post)

    def decode(self, g, compute):
        """Values of the stored ``g`` in the dtype ``compute`` (unscaled)."""
        return g.astype(compute)

    def all_finite(self, g) -> bool:
        """True if every stored value of ``g`` is finite."""
        return bool(backends.get_array_module(g).isfinite(g).all())

    # ---- CUDA C pieces (hpcsolve.lbm.kernels.population_code)
    @property
    def cuda_header(self) -> str:
        """Device code every kernel source of this format starts with."""
        return ""

    def cuda_widen(self, real_t: str) -> str:
        """Format: a stored expression -> its value in the compute type ``real_t``."""
        return f"({real_t}){{}}"

    def cuda_narrow(self) -> str:
        """Format: a compute-type expression -> the stored value."""
        return f"({self.c_type})({{}})"

    @property
    def cuda_pair(self) -> dict | None:
        """The pair kernel's 32-bit words of two stored values (the even cell in the low half): ``word`` / ``elem``
        C types, ``high`` / ``low`` (a half widened to float), ``pack`` (two floats, rounded to nearest) and the
        ``prelude`` defining them; None: no pair kernel (values wider than 16 bits)."""
        return None

    def cuda_seed(self, name: str, h0: str, cell: str) -> str:
        """A C statement binding ``name`` to a cell's random seed (:attr:`stochastic` formats; else "")."""
        return ""

    def cuda_encode_step(self, g: str, i: int, seed: str) -> str:
        """C of the stochastic store of direction ``i``'s (scaled) value ``g`` with the cell's ``seed``."""
        raise TypeError(f"the {self.name} codec rounds its stores to nearest")

    def cuda_pack_step(self, a: str, b: str, i: int, seed_a: str, seed_b: str) -> str:
        """C of the pair kernel's stochastic word of direction ``i``'s (scaled) values ``a`` (low) and ``b``."""
        raise TypeError(f"the {self.name} codec rounds its stores to nearest")

    # ---- Numba pieces (the names bound by :meth:`numba_namespace`)
    def numba_widen(self, same_dtype: bool) -> str:
        """Format: a stored expression -> its compute value (``CT``: the compute scalar type)."""
        return "{}" if same_dtype else "CT({})"

    def numba_narrow(self) -> str:
        """Format: a compute expression -> the stored value ("{}": the store converts)."""
        return "{}"

    def numba_namespace(self) -> dict:
        """Device functions the Numba expressions of this format call, by name."""
        return {}

    def numba_seed(self, name: str, h0: str, cell: str) -> str:
        return ""

    def numba_encode_step(self, g: str, i: int, seed: str) -> str:
        raise TypeError(f"the {self.name} codec rounds its stores to nearest")

    def numba_pack_step(self, a: str, b: str, i: int, seed_a: str, seed_b: str) -> str:
        raise TypeError(f"the {self.name} codec rounds its stores to nearest")

    def numba_pair_functions(self):
        """(lo, hi, pack) of the Numba pair kernel's int32 words (the even cell in the low half); None: no pairs."""
        return None


class HalfCodec(Codec):
    """IEEE float16 storage: ``__half`` with the CUDA conversions (round to nearest), words of two halves."""

    @property
    def cuda_header(self) -> str:
        return "#include <cuda_fp16.h>\n"

    def cuda_widen(self, real_t: str) -> str:
        return "__half2float({})"

    def cuda_narrow(self) -> str:
        return "__float2half_rn({})"

    @property
    def cuda_pair(self) -> dict:
        return {"word": "__half2", "elem": "__half", "high": "__high2float",
                "low": "__low2float", "pack": "__floats2half2_rn", "prelude": ""}

    def numba_pair_functions(self):
        return half_pair_functions()


class FP16CCodec(Codec):
    """The FP16C format (hpcsolve/core/fp16c.py): uint16 codes, stochastic rounding of the step's stores."""

    integer_codes = True
    stochastic = True

    @property
    def conversion_chunk(self) -> int:
        return fp16c.CHUNK

    def encode(self, x):
        return fp16c.encode(x)          # (the compute dtype is float32, the format's input)

    def encode_step(self, post, h0, cells):
        return fp16c.encode_stochastic(post, fp16c.seed(h0, cells))

    def decode(self, g, compute):
        return fp16c.decode(g).astype(compute)

    def all_finite(self, g) -> bool:
        return not bool(fp16c.is_nan(g).any())

    @property
    def cuda_header(self) -> str:
        return fp16c.CUDA_SOURCE

    def cuda_widen(self, real_t: str) -> str:
        return "fp16c_decode({})"

    def cuda_narrow(self) -> str:
        return "fp16c_encode({})"

    @property
    def cuda_pair(self) -> dict:
        return {"word": "unsigned int", "elem": "unsigned short", "high": "fp16c_high",
                "low": "fp16c_low", "pack": "fp16c_pack", "prelude": fp16c.CUDA_PAIR_SOURCE}

    def cuda_seed(self, name: str, h0: str, cell: str) -> str:
        return f"const unsigned int {name} = fp16c_seed({h0}, (unsigned int)({cell}));"

    def cuda_encode_step(self, g: str, i: int, seed: str) -> str:
        return f"fp16c_encode_sr({g}, {fp16c.cuda_random_word(i, seed)})"

    def cuda_pack_step(self, a: str, b: str, i: int, seed_a: str, seed_b: str) -> str:
        return (f"fp16c_pack_sr({a}, {b}, {fp16c.cuda_random_word(i, seed_a)}, "
                f"{fp16c.cuda_random_word(i, seed_b)})")

    def numba_widen(self, same_dtype: bool) -> str:
        return "FP16C_DECODE({})"

    def numba_narrow(self) -> str:
        return "FP16C_ENCODE({})"

    def numba_namespace(self) -> dict:
        ns = {}
        ns["FP16C_DECODE"], ns["FP16C_ENCODE"] = fp16c.numba_functions()
        seed, encoders, packers = fp16c.numba_stochastic_functions()
        ns["FP16C_SEED"] = seed
        for i, (enc, pack) in enumerate(zip(encoders, packers)):
            ns[f"FP16C_ENCODE_SR{i}"], ns[f"FP16C_PACK_SR{i}"] = enc, pack
        return ns

    def numba_seed(self, name: str, h0: str, cell: str) -> str:
        return f"{name} = FP16C_SEED({h0}, {cell})"

    def numba_encode_step(self, g: str, i: int, seed: str) -> str:
        return f"FP16C_ENCODE_SR{i}({g}, {seed})"

    def numba_pack_step(self, a: str, b: str, i: int, seed_a: str, seed_b: str) -> str:
        return f"FP16C_PACK_SR{i}({a}, {b}, {seed_a}, {seed_b})"

    def numba_pair_functions(self):
        return fp16c.numba_pair_functions()


@functools.lru_cache(maxsize=None)
def half_pair_functions():
    """(half_lo, half_hi, pack_halves): float16 halves of an int32 word <-> float32. On the GPU, Numba
    intrinsics (LLVM trunc/bitcast/fpext, fptrunc = cvt.rn.f16.f32); under the simulator, NumPy views."""
    if backends.cuda_simulator_enabled():
        def half_lo(u):
            return np.float32(np.array(int(u) & 0xFFFF, dtype=np.uint16).view(np.float16))

        def half_hi(u):
            return np.float32(np.array((int(u) >> 16) & 0xFFFF, dtype=np.uint16).view(np.float16))

        def pack_halves(lo, hi):
            bits = np.array([lo, hi], dtype=np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)
            return np.array(bits[0] | (bits[1] << 16), dtype=np.uint32).view(np.int32)[()]

        return half_lo, half_hi, pack_halves
    return _half_intrinsics()


def _half_intrinsics():
    """The GPU versions of :func:`half_pair_functions` (LLVM IR intrinsics)."""
    from llvmlite import ir  # late: optional GPU dependency, imported on first use
    from numba import types  # late: optional GPU dependency, imported on first use
    from numba.cuda.extending import intrinsic  # late: optional GPU dependency, imported on first use

    def _widen(builder, v16):
        return builder.fpext(builder.bitcast(v16, ir.HalfType()), ir.FloatType())

    @intrinsic
    def half_lo(typingctx, u):
        if not isinstance(u, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            return _widen(builder, builder.trunc(args[0], ir.IntType(16)))
        return types.float32(u), codegen

    @intrinsic
    def half_hi(typingctx, u):
        if not isinstance(u, types.Integer):
            return None

        def codegen(context, builder, sig, args):
            v = builder.lshr(args[0], ir.Constant(args[0].type, 16))
            return _widen(builder, builder.trunc(v, ir.IntType(16)))
        return types.float32(u), codegen

    @intrinsic
    def pack_halves(typingctx, lo, hi):
        if not (isinstance(lo, types.Float) and isinstance(hi, types.Float)):
            return None

        def codegen(context, builder, sig, args):
            # one <2 x float> -> <2 x half> fptrunc (sm_80+: a single cvt.rn.f16x2.f32), bitcast to i32
            f2 = ir.VectorType(ir.FloatType(), 2)
            v = builder.insert_element(ir.Constant(f2, ir.Undefined), args[0], ir.Constant(ir.IntType(32), 0))
            v = builder.insert_element(v, args[1], ir.Constant(ir.IntType(32), 1))
            h2 = builder.fptrunc(v, ir.VectorType(ir.HalfType(), 2))
            return builder.bitcast(h2, ir.IntType(32))
        return types.int32(lo, hi), codegen

    return half_lo, half_hi, pack_halves


FP64 = Codec("fp64", np.float64, "double", "float64")
FP32 = Codec("fp32", np.float32, "float", "float32")
FP16S = HalfCodec("fp16s", np.float16, "__half", "IEEE float16")
FP16C = FP16CCodec("fp16c", np.uint16, "unsigned short", "FP16C codes (1+4+11 bits, hpcsolve/core/fp16c.py)")

#: the codec of a plain storage dtype (a policy that names none stores its dtype as is)
FLOAT_CODECS = {c.storage: c for c in (FP64, FP32, FP16S)}
