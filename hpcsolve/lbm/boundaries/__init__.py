"""The boundary rules, each in one module with everything it needs: the rule's reference (the NumPy links and
how they are applied, with the formula from ``physics.py``), its device tables, its term in the
momentum-exchange force and its kernel piece (``kernel_plan.Op`` sequence the CUDA C and Numba emitters
write out).

- :mod:`.wall`: half-way bounce-back on resting walls (flag WALL);
- :mod:`.velocity`: bounce-back with a wall velocity (moving lids, velocity inlets; flag VELOCITY);
- :mod:`.outlet`: anti-bounce-back at a fixed or characteristic (non-reflecting) pressure (flag OUTLET);
- interpolated (Bouzidi) bounce-back on curved walls: ``hpcsolve.lbm.boundaries.bouzidi`` (links, pre-pass).

:func:`link_rules` is the order the step kernels test a boundary link's source flag in.
"""

from __future__ import annotations

from hpcsolve.lbm.boundaries import outlet, velocity, wall
from hpcsolve.lbm.kernels.kernel_plan import LinkRule


def link_rules(characteristic: bool = False) -> tuple[LinkRule, ...]:
    """The rules of the step kernels (``kernel_plan.LinkRule``) in the order they test the flag (the last one
    is what remains: flags are FLUID, WALL, VELOCITY or OUTLET); ``characteristic``: the outlet looks up its
    reference outflow (``outlet.characteristic_outlet``)."""
    return (wall.RULE, velocity.RULE, outlet.rule(characteristic))
