"""How generated kernels read and write stored populations: the text of every load and store, from
the precision policy. The kernel-side twin of ``Precision.encode`` / ``Precision.decode``.

A stored population is g = h * scale in the storage dtype, h = f - w the shifted population
(hpcsolve/core/precision.py). Generated code decodes g as ``widen(g) * inverse scale`` and encodes a
compute-dtype value h as ``narrow(h * scale)``, the operations and their order of ``decode`` and
``encode``; a policy without a scale (fp64, fp32) gets no multiplication at all. Two emitters ask
for it, each with one constructor:

- :func:`cuda_code` (the CUDA C of ``kernels_cupy``): C type names, scale factors as literals of the
  compute dtype (``0.00390625f``);
- :func:`numba_code` (the Python kernels of ``kernels_numba`` and ``bouzidi``): the names ``CT``,
  ``SCALE``, ``INV_SCALE``, bound in the kernel's namespace by :meth:`NumbaPopulationCode.namespace`.

The conversions are the storage codec's (``policy.codec``, hpcsolve/core/codecs.py: casts, float16's, or FP16C's
device functions CUDA C ``fp16c_decode`` / ``fp16c_encode``, Numba ``FP16C_DECODE`` / ``FP16C_ENCODE``); where the
codec is :attr:`~hpcsolve.core.codecs.Codec.stochastic` (FP16C), the step's stores of post-collision populations
round stochastically (``Precision.encode_step``): :meth:`PopulationCode.seed` gives a cell's random seed from its
pre-collision rest population and index, :meth:`PopulationCode.encode_step` the store of direction i with it (for
every other policy: :meth:`PopulationCode.encode`, no seed), :meth:`CudaPopulationCode.pack_step` the pair
kernel's word; :attr:`CudaPopulationCode.pair_words` the pair kernel's 16-bit words (None: no pair kernel).

The emitters pass an expression of a stored value (``A[k]``, ``load_at(A, k)``) or of a compute value
and splice the result into their templates; none of them tests the policy's scale itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcsolve.core import codecs
from hpcsolve.core.codecs import Codec


@dataclass(frozen=True)
class PopulationCode:
    """Load/store expressions of one policy for one kernel language."""

    widen: str              # format: a storage-dtype expression -> its compute-dtype value
    narrow: str             # format: a compute-dtype expression -> the storage dtype ("{}": the store converts)
    scale_text: str | None  # the factor h -> g as the language spells it; None: stored unscaled
    inverse_text: str | None
    storage_codec: Codec = codecs.FP64   # the policy's storage codec (hpcsolve/core/codecs.py): its pieces

    def unscale(self, value: str) -> str:
        """h from a stored value already in the compute dtype (e.g. one half of a widened word)."""
        return f"{value} * {self.inverse_text}" if self.inverse_text else value

    def scale(self, h: str) -> str:
        """h * scale, still in the compute dtype (a store that narrows by itself, e.g. a packed pair)."""
        return f"{h} * {self.scale_text}" if self.scale_text else h

    def decode(self, stored: str) -> str:
        """h (compute dtype) from an expression of a stored population."""
        return self.unscale(self.widen.format(stored))

    def encode(self, h: str) -> str:
        """The stored value (storage dtype) of a compute-dtype expression h."""
        return self.narrow.format(self.scale(h))

    @property
    def stochastic(self) -> bool:
        """True where the step's stores round stochastically (FP16C: ``fp16c.encode_stochastic``)."""
        return self.storage_codec.stochastic

    @property
    def integer_codes(self) -> bool:
        """True where stored values are integer codes (FP16C): a finiteness test decodes them first."""
        return self.storage_codec.integer_codes

    def seed(self, name: str, h0: str, cell: str) -> str:
        """A statement binding ``name`` to the random seed of a cell (``fp16c.seed``) from the expressions of its
        pre-collision rest population and flat index; "" where the stores do not round stochastically."""
        raise NotImplementedError

    def encode_step(self, h: str, i: int, seed: str) -> str:
        """The stored value of direction ``i``'s post-collision value h in a step (stochastic rounding with the
        cell's ``seed`` where :attr:`stochastic`, else :meth:`encode`)."""
        raise NotImplementedError


@dataclass(frozen=True)
class CudaPopulationCode(PopulationCode):
    real_t: str = "double"   # C type of the compute dtype
    store_t: str = "double"  # C type of the storage dtype
    suffix: str = ""         # literal suffix of the compute dtype ('f' for float)

    def seed(self, name: str, h0: str, cell: str) -> str:
        return self.storage_codec.cuda_seed(name, h0, cell)

    def encode_step(self, h: str, i: int, seed: str) -> str:
        if not self.stochastic:
            return self.encode(h)
        return self.storage_codec.cuda_encode_step(self.scale(h), i, seed)

    def pack_step(self, a: str, b: str, i: int, seed_a: str, seed_b: str) -> str:
        """The pair kernel's stored word of direction ``i``'s post-collision values a (low half) and b, rounded
        stochastically with the two cells' seeds (:attr:`stochastic` only)."""
        return self.storage_codec.cuda_pack_step(self.scale(a), self.scale(b), i, seed_a, seed_b)

    @property
    def pair_words(self) -> dict | None:
        """The pair kernel's words of two stored values (``Codec.cuda_pair``); None: no pair kernel."""
        return self.storage_codec.cuda_pair

    @property
    def header(self) -> str:
        return self.storage_codec.cuda_header


#: C types of the compute dtypes (a stored value's C type is its codec's ``c_type``)
_C_TYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float"}


def cuda_code(policy) -> CudaPopulationCode:
    """CUDA C: the codec's conversions (``__half2float`` / ``__float2half_rn`` for float16, the FP16C device
    functions, C casts otherwise); the scale as literals of the compute dtype."""
    codec, compute = policy.codec, np.dtype(policy.compute)
    real_t = _C_TYPES[compute]
    suffix = "f" if compute == np.float32 else ""
    scale, inverse = _factors(policy)
    return CudaPopulationCode(codec.cuda_widen(real_t), codec.cuda_narrow(), scale and repr(scale) + suffix,
                              inverse and repr(inverse) + suffix, storage_codec=codec,
                              real_t=real_t, store_t=codec.c_type, suffix=suffix)


@dataclass(frozen=True)
class NumbaPopulationCode(PopulationCode):
    compute: np.dtype = np.dtype(np.float64)
    population_scale: float = 1.0

    def seed(self, name: str, h0: str, cell: str) -> str:
        return self.storage_codec.numba_seed(name, h0, cell)

    def encode_step(self, h: str, i: int, seed: str) -> str:
        return self.storage_codec.numba_encode_step(self.scale(h), i, seed) if self.stochastic else self.encode(h)

    def pack_step(self, a: str, b: str, i: int, seed_a: str, seed_b: str) -> str:
        """The pair kernel's stored word of direction ``i``'s post-collision values a (low half) and b, rounded
        stochastically with the two cells' seeds (:attr:`stochastic` only)."""
        return self.storage_codec.numba_pack_step(self.scale(a), self.scale(b), i, seed_a, seed_b)

    def namespace(self) -> dict:
        """The names the expressions use (``CT`` the compute scalar type, ``SCALE``, ``INV_SCALE``, and the codec's
        device functions, e.g. FP16C's ``FP16C_DECODE`` / ``FP16C_ENCODE`` of hpcsolve/core/fp16c.py)."""
        ct = self.compute.type
        ns = {"CT": ct, "SCALE": ct(self.population_scale), "INV_SCALE": ct(1.0 / self.population_scale)}
        ns.update(self.storage_codec.numba_namespace())
        return ns


def numba_code(policy) -> NumbaPopulationCode:
    """Numba: the codec's conversions (loads of a narrower plain dtype widened by ``CT(...)``; stores convert by
    themselves)."""
    codec, compute = policy.codec, np.dtype(policy.compute)
    scale, inverse = _factors(policy)
    return NumbaPopulationCode(codec.numba_widen(codec.storage == compute), codec.numba_narrow(),
                               scale and "SCALE", inverse and "INV_SCALE", storage_codec=codec,
                               compute=compute, population_scale=float(policy.population_scale))


def _factors(policy) -> tuple[float | None, float | None]:
    """(scale, 1 / scale) as Python floats, (None, None) where the policy stores unscaled."""
    if not policy.scaled:
        return None, None
    return float(policy.population_scale), 1.0 / float(policy.population_scale)
