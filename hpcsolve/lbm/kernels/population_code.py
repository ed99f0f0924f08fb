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

FP16C storage (``policy.codec``, hpcsolve/core/fp16c.py) widens and narrows through that module's device functions
(CUDA C ``fp16c_decode`` / ``fp16c_encode``, Numba ``FP16C_DECODE`` / ``FP16C_ENCODE``); the step's stores of
post-collision populations round stochastically (``Precision.encode_step``): :meth:`PopulationCode.seed` gives a
cell's random seed from its pre-collision rest population and index, :meth:`PopulationCode.encode_step` the store
of direction i with it (for every other policy: :meth:`PopulationCode.encode`, no seed).

The emitters pass an expression of a stored value (``A[k]``, ``load_at(A, k)``) or of a compute value
and splice the result into their templates; none of them tests the policy's scale itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PopulationCode:
    """Load/store expressions of one policy for one kernel language."""

    widen: str              # format: a storage-dtype expression -> its compute-dtype value
    narrow: str             # format: a compute-dtype expression -> the storage dtype ("{}": the store converts)
    scale_text: str | None  # the factor h -> g as the language spells it; None: stored unscaled
    inverse_text: str | None

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
        return getattr(self, "codec", None) == "fp16c"

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

    codec: str | None = None  # a custom 16-bit format ("fp16c"): its device functions go in the header

    def seed(self, name: str, h0: str, cell: str) -> str:
        return f"const unsigned int {name} = fp16c_seed({h0}, (unsigned int)({cell}));" if self.stochastic else ""

    def encode_step(self, h: str, i: int, seed: str) -> str:
        if not self.stochastic:
            return self.encode(h)
        from hpcsolve.core import fp16c

        a, c = fp16c.STREAM[i]
        return f"fp16c_encode_sr({self.scale(h)}, {a:#x}u * {seed} + {c:#x}u)"

    @property
    def header(self) -> str:
        if self.codec == "fp16c":
            from hpcsolve.core import fp16c

            return fp16c.CUDA_SOURCE
        return "#include <cuda_fp16.h>\n" if self.store_t == "__half" else ""


_C_TYPES = {np.dtype(np.float64): "double", np.dtype(np.float32): "float", np.dtype(np.float16): "__half",
            np.dtype(np.uint16): "unsigned short"}


def cuda_code(policy) -> CudaPopulationCode:
    """CUDA C: ``__half2float`` / ``__float2half_rn`` (round to nearest) for 16-bit storage, C casts
    otherwise; the scale as literals of the compute dtype."""
    storage, compute = np.dtype(policy.storage), np.dtype(policy.compute)
    real_t, store_t = _C_TYPES[compute], _C_TYPES[storage]
    suffix = "f" if compute == np.float32 else ""
    if policy.codec == "fp16c":
        widen, narrow = "fp16c_decode({})", "fp16c_encode({})"
    elif store_t == "__half":
        widen, narrow = "__half2float({})", "__float2half_rn({})"
    else:
        widen, narrow = f"({real_t}){{}}", f"({store_t})({{}})"
    scale, inverse = _factors(policy)
    return CudaPopulationCode(widen, narrow, scale and repr(scale) + suffix, inverse and repr(inverse) + suffix,
                              real_t=real_t, store_t=store_t, suffix=suffix, codec=policy.codec)


@dataclass(frozen=True)
class NumbaPopulationCode(PopulationCode):
    compute: np.dtype = np.dtype(np.float64)
    population_scale: float = 1.0
    codec: str | None = None

    def seed(self, name: str, h0: str, cell: str) -> str:
        return f"{name} = FP16C_SEED({h0}, {cell})" if self.stochastic else ""

    def encode_step(self, h: str, i: int, seed: str) -> str:
        return f"FP16C_ENCODE_SR{i}({self.scale(h)}, {seed})" if self.stochastic else self.encode(h)

    def namespace(self) -> dict:
        """The names the expressions use (``CT`` the compute scalar type, ``SCALE``, ``INV_SCALE``; with the
        FP16C codec ``FP16C_DECODE`` / ``FP16C_ENCODE``, the device functions of hpcsolve/core/fp16c.py)."""
        ct = self.compute.type
        ns = {"CT": ct, "SCALE": ct(self.population_scale), "INV_SCALE": ct(1.0 / self.population_scale)}
        if self.codec == "fp16c":
            from hpcsolve.core import fp16c

            ns["FP16C_DECODE"], ns["FP16C_ENCODE"] = fp16c.numba_functions()
            seed, encoders, packers = fp16c.numba_stochastic_functions()
            ns["FP16C_SEED"] = seed
            for i, (enc, pack) in enumerate(zip(encoders, packers)):
                ns[f"FP16C_ENCODE_SR{i}"], ns[f"FP16C_PACK_SR{i}"] = enc, pack
        return ns


def numba_code(policy) -> NumbaPopulationCode:
    """Numba: loads of a narrower storage dtype widened by ``CT(...)``; stores convert by themselves."""
    storage, compute = np.dtype(policy.storage), np.dtype(policy.compute)
    if policy.codec == "fp16c":
        widen, narrow = "FP16C_DECODE({})", "FP16C_ENCODE({})"
    else:
        widen, narrow = ("{}" if storage == compute else "CT({})"), "{}"
    scale, inverse = _factors(policy)
    return NumbaPopulationCode(widen, narrow, scale and "SCALE", inverse and "INV_SCALE",
                               compute=compute, population_scale=float(policy.population_scale), codec=policy.codec)


def _factors(policy) -> tuple[float | None, float | None]:
    """(scale, 1 / scale) as Python floats, (None, None) where the policy stores unscaled."""
    if not policy.scaled:
        return None, None
    return float(policy.population_scale), 1.0 / float(policy.population_scale)
