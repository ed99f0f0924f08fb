"""The collision models, one object each, in one registry: the only place a model's name is compared.

A :class:`CollisionModel` states its name (the case's ``lattice.collision``), its relaxation rates from tau
(:meth:`~CollisionModel.omegas`), its stability notes (what ``derive`` warns about before a run, what a run that
blew up suggests) and its kernel piece (the ``physics`` function the NumPy reference calls and the emitters trace or
call, with its arguments after the populations, with and without the absorbing layer). The physics itself lives
in ``physics.py`` (``collide_bgk``, ``collide_trt``, their ``_layer`` forms); code asks the model object
(:func:`get`) instead of comparing names. A new model is one object here plus its physics function.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcsolve.core.errors import CaseError
from hpcsolve.lbm import physics


@dataclass(frozen=True)
class CollisionModel:
    """One collision model: ``name``, its ``label`` (text of kernel comments), the physics functions without and
    with the absorbing layer (``fn``, ``fn_layer``) and their relaxation arguments (``rates``: names of the kernel
    locals ``omega_plus`` / ``omega_minus``), the tau below which it is ``fragile_below`` (None: robust) and the
    advice a run that blew up gets (``advice``: "" for none)."""

    name: str
    label: str
    fn: str
    fn_layer: str
    rates: tuple[str, ...]
    two_rates: bool
    fragile_below: float | None = None
    advice: str = ""

    def omegas(self, tau: float, magic: float) -> tuple[float, float]:
        """(omega+, omega-) of relaxation time ``tau`` (``magic``: TRT's Lambda; one rate: both are 1/tau)."""
        if self.two_rates:
            return physics.trt_omegas(tau, magic)
        w = physics.omega_from_tau(tau)
        return w, w

    def kernel_call(self, layer: bool) -> tuple[str, tuple[str, ...]]:
        """(physics function, its arguments after the populations) of the kernels' collision."""
        return (self.fn_layer, self.rates + ("layer",)) if layer else (self.fn, self.rates)

    def collide(self, P, h, omega_plus, omega_minus, layer=None) -> tuple:
        """The post-collision populations of ``h`` (the NumPy reference; ``P``: ``physics.physics_for``; ``layer``:
        the absorbing layer's coefficient per cell, None without one)."""
        fn, names = self.kernel_call(layer is not None)
        values = {"omega_plus": omega_plus, "omega_minus": omega_minus, "layer": layer}
        return getattr(P, fn)(h, *(values[n] for n in names))

    def stability_warnings(self, tau: float) -> list[str]:
        """What ``derive`` warns about a run at relaxation time ``tau`` with this model."""
        if self.fragile_below is not None and tau < self.fragile_below:
            robust = [m.name for m in REGISTRY.values() if m.fragile_below is None]
            return [f"tau = {tau:.4f} with {self.label} is prone to instability; lattice.collision = "
                    f"{robust[0]!r} is more robust"]
        return []


BGK = CollisionModel("bgk", "BGK", "collide_bgk", "collide_bgk_layer", ("omega_plus",), False,
                     fragile_below=0.55, advice=", or use lattice.collision = 'trt'")
TRT = CollisionModel("trt", "TRT", "collide_trt", "collide_trt_layer", ("omega_plus", "omega_minus"), True)

#: every collision model by name (the case schema's allowed values, in this order)
REGISTRY: dict[str, CollisionModel] = {m.name: m for m in (BGK, TRT)}
NAMES = tuple(REGISTRY)


def get(name: str) -> CollisionModel:
    """The model called ``name``; a CaseError naming the allowed ones otherwise."""
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise CaseError.invalid("collision", name, ", ".join(NAMES)) from None
