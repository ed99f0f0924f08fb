"""Precision policies: what is stored, what is computed in, and where a policy applies.

A policy is a small frozen object, validated once (``get_precision``) and passed as the object;
code asks it (``policy.storage``, ``policy.encode(h)``, ``policy.fem_method``), it never compares
names. LBM populations are always stored shifted (f_i - w_i, "DDF shifting"): the physics works on
h = f - w, and a policy says how h is stored (``encode``: times ``population_scale``, cast to the
storage dtype) and read back (``decode``: to the compute dtype, divided by the scale).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpcsolve.core import codecs
from hpcsolve.core.codecs import Codec
from hpcsolve.core.errors import CaseError


#: a kernel check's bound by bytes per stored value: 8 (float64) rounding only; 4 (float32) ~1e3 unit roundoffs over
#: 50 steps; 2 (16-bit) the storage's 3 digits
_CHECK_BOUND_BY_BYTES = {8: 1e-10, 4: 1e-4, 2: 5e-2}


@dataclass(frozen=True)
class Precision:
    name: str
    storage: np.dtype          # dtype of the large state arrays (LBM populations, FEM vectors/matrix)
    compute: np.dtype          # dtype of the arithmetic
    families: frozenset        # solver families that support it: "lbm", "fem"
    population_scale: float = 1.0  # LBM: stored value = (f_i - w_i) * scale (fp16s uses range well)
    refinement: bool = False   # FEM: low-precision inner work, float64 residual and solution
    description: str = ""
    codec: Codec | None = None  # how values are stored (hpcsolve/core/codecs.py); None: storage's plain float codec
    #: LBM: the relative L2 velocity difference from the NumPy reference that a kernel check of this precision accepts
    #: (``hpcsolve bench lbm``: a 64^2 cavity after 50 steps, 16-bit storage against fp64); None: by storage width
    check_bound: float | None = None

    def __post_init__(self):
        if self.codec is None:
            object.__setattr__(self, "codec", codecs.FLOAT_CODECS[np.dtype(self.storage)])
        if self.check_bound is None:
            object.__setattr__(self, "check_bound", _CHECK_BOUND_BY_BYTES.get(self.storage_bytes, 5e-2))
        if self.codec.storage != np.dtype(self.storage):
            raise ValueError(f"precision {self.name}: codec {self.codec} stores {self.codec.storage}, "
                             f"not {self.storage}")

    @property
    def storage_bytes(self) -> int:
        return np.dtype(self.storage).itemsize

    # ---- LBM: how shifted populations h = f - w are stored
    @property
    def scaled(self) -> bool:
        """True when stored populations carry a scale factor (a kernel multiplies on load/store)."""
        return self.population_scale != 1.0

    def encode(self, h):
        """Stored state g = h * scale in the storage dtype, from shifted populations h (NumPy or CuPy
        array, or a scalar) in the compute dtype: the multiplication happens in the compute dtype, as
        in the kernels, so every backend stores the same bits; the codec converts."""
        return self.codec.encode(self._scaled(h))

    def encode_step(self, post, h0, cells):
        """The stored state of a step's post-collision populations ``post`` (9, n), compute dtype, of the cells with
        flat indices ``cells``; ``h0`` their pre-collision rest populations (decoded, exact): a stochastic codec
        (fp16c) rounds stochastically (``fp16c.encode_stochastic``, seeds from h0 and the cell, as the kernels do),
        every other one as :meth:`encode` (the scale in the compute dtype first, as encode)."""
        return self.codec.encode_step(self._scaled(post), h0, cells)

    def _scaled(self, h):
        return h * np.dtype(self.compute).type(self.population_scale) if self.scaled else h

    def decode(self, g):
        """Shifted populations h = g / scale in the compute dtype, from the stored state g."""
        ct = np.dtype(self.compute)
        h = self.codec.decode(g, ct)
        if self.scaled:
            h = h * ct.type(1.0 / self.population_scale)
        return h

    def all_finite(self, g) -> bool:
        """True if every stored value ``g`` (NumPy or CuPy array) is finite: the blow-up check."""
        return self.codec.all_finite(g)

    # ---- FEM
    @property
    def fem_method(self) -> str:
        """The default Krylov method: CG in one precision, or CG with reliable updates for 'mixed'."""
        return "cg-reliable" if self.refinement else "cg"

    def supports(self, family: str) -> bool:
        return family in self.families

    def require(self, family: str, field: str = "run.precision") -> "Precision":
        if not self.supports(family):
            allowed = ", ".join(p.name for p in POLICIES.values() if p.supports(family))
            raise CaseError.invalid(field, self.name, allowed, why=f"precision {self.name!r} does not apply to {family}")
        return self

    def __str__(self) -> str:
        return self.name


FP64 = Precision("fp64", np.dtype(np.float64), np.dtype(np.float64), frozenset({"lbm", "fem"}), codec=codecs.FP64,
                 description="float64 storage and arithmetic")
FP32 = Precision("fp32", np.dtype(np.float32), np.dtype(np.float32), frozenset({"lbm", "fem"}), codec=codecs.FP32,
                 description="float32 storage and arithmetic")
# fp16 keeps ~3.3 decimal digits; shifted populations f_i - w_i are O(Ma^2 + drho) ~ 1e-2..1e-3,
# so scaling them up moves them away from float16's subnormal range (< 6.1e-5) where digits are lost.
FP16S = Precision("fp16s", np.dtype(np.float16), np.dtype(np.float32), frozenset({"lbm"}),
                  population_scale=256.0, codec=codecs.FP16S,
                  description="float16 storage of shifted, scaled populations; float32 arithmetic")
# FP16C (hpcsolve/core/fp16c.py): 1 sign, 4 exponent, 11 mantissa bits, normal from 6.1e-5 to 2, no scale needed:
# the shifted populations already lie in that range; one mantissa bit more than float16
FP16C = Precision("fp16c", np.dtype(np.uint16), np.dtype(np.float32), frozenset({"lbm"}), codec=codecs.FP16C,
                  description="FP16C storage of shifted populations (1+4+11 bits); float32 arithmetic")
MIXED = Precision("mixed", np.dtype(np.float32), np.dtype(np.float32), frozenset({"fem"}),
                  refinement=True,
                  description="float32 inner solve, float64 solution and true residual")

POLICIES: dict[str, Precision] = {p.name: p for p in (FP64, FP32, FP16S, FP16C, MIXED)}
#: the precision every comparison and benchmark measures against (compare's reference, bench's speed-up baseline)
REFERENCE = FP64


def register(policy: Precision) -> Precision:
    """Add ``policy`` to :data:`POLICIES` (a new precision is one ``Precision`` and this call): the case schema, the
    CLI's choices, ``compare`` and ``hpcsolve bench`` read the registry when asked. ValueError for a name already
    registered, or one that is not a lower-case word (case files and folder names carry it)."""
    if not isinstance(policy, Precision):
        raise ValueError(f"register: {policy!r} is not a Precision")
    if policy.name in POLICIES:
        raise ValueError(f"register: precision {policy.name!r} is already registered")
    if not policy.name or policy.name != policy.name.lower() or not policy.name.replace("_", "").isalnum():
        raise ValueError(f"register: precision name {policy.name!r} is not a lower-case word")
    POLICIES[policy.name] = policy
    return policy


def get_precision(name: "str | Precision", family: str | None = None, field: str = "run.precision") -> Precision:
    """Return the policy called ``name``; with ``family``, check that it applies there."""
    if isinstance(name, Precision):
        policy = name
    else:
        try:
            policy = POLICIES[str(name).lower()]
        except KeyError:
            allowed = ", ".join(p.name for p in POLICIES.values() if family is None or p.supports(family))
            raise CaseError.invalid(field, name, allowed) from None
    if family is not None:
        policy.require(family, field)
    return policy


def names(family: str | None = None) -> list[str]:
    return [p.name for p in POLICIES.values() if family is None or p.supports(family)]
