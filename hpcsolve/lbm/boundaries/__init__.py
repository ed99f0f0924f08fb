"""The boundary rules, each in one module with everything it needs: the rule's reference (the NumPy links and
how they are applied, with the formula from ``physics.py``), its device tables, its term in the
momentum-exchange force and its kernel piece (``kernel_plan.Op`` sequence the CUDA C and Numba emitters
write out), gathered in one ``RULE`` object (``hpcsolve.lbm.rules.BoundaryRule``) that ``hpcsolve.lbm.rules``
lists.

- :mod:`.wall`: half-way bounce-back on resting walls (flag WALL);
- :mod:`.velocity`: bounce-back with a wall velocity (moving lids, velocity inlets; flag VELOCITY);
- :mod:`.outlet`: anti-bounce-back at a fixed or characteristic (non-reflecting) pressure (flag OUTLET);
- interpolated (Bouzidi) bounce-back on curved walls: ``hpcsolve.lbm.boundaries.bouzidi`` (links, pre-pass).

This package imports the kernel room's vocabulary (``hpcsolve.lbm.kernels.kernel_plan``), never the reverse: the
emitters reach the rules through ``hpcsolve.lbm.rules``. :func:`link_rules` (``rules.link_rules``) is the order the
step kernels test a boundary link's source flag in.
"""

from __future__ import annotations

from hpcsolve.lbm.rules import link_rules

__all__ = ["link_rules"]
