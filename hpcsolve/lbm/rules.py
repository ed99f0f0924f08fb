"""The registry of LBM boundary rules: one object per rule, defined in the rule's own module, listed here once.

A boundary rule acts on link i of a fluid cell x whose neighbour x - c_i is a boundary cell with the rule's flag.
Its module (``hpcsolve/lbm/boundaries/wall.py``, ``velocity.py``, ``outlet.py`` are the models) holds a
:class:`BoundaryRule` object, ``RULE``, that provides everything the rest of the package asks of a rule:

- ``name``, ``flag`` (its cell flag; ``hpcsolve/lbm/flags.py`` holds the shipped ones, a new rule may define its
  own code in its module) and ``sides``: the case names of the domain sides it implements (``boundaries.left = "..."``);
- :meth:`BoundaryRule.kernel_piece`: the ``kernel_plan.LinkRule`` both GPU emitters write into every step layout;
- :meth:`BoundaryRule.numpy_links`: the NumPy reference on its links (an object with ``apply(P, flat, own_h)`` and
  ``set_scale(factor)``), or None where the NumPy gather already is the rule (resting walls);
- :meth:`BoundaryRule.looks_up`: whether its cells' boundary velocities go into the kernels' velocity table
  (``boundaries.velocity.velocity_table``);
- :meth:`BoundaryRule.side_velocity`: the boundary velocity a domain side of its case name gets from the case
  (``geometry.build`` writes it);
- :meth:`BoundaryRule.force_terms`: its momentum-exchange force term on the links into its cells inside a measured
  mask, where it has one (``boundaries.force.force_links`` loops over the rules; the interpolated Bouzidi walls, no
  rule of a flag, add theirs there, ``bouzidi.force_terms`` says why);
- :attr:`BoundaryRule.needs_own_velocity`: whether its kernel piece reads the fluid cell's own velocity at time t,
  which in-place streaming keeps in a table for the fluid cells next to the rule's cells (``steppers.inplace``).

:data:`RULES` lists the rules as ``"module:attribute"`` strings, imported on first use (as ``core.family.REGISTRY``
does): the kernel emitters, the steppers and the geometry loop over :func:`rules` and never name a rule, and the
kernel room (``hpcsolve.lbm.kernels``) reaches the rules without importing ``hpcsolve.lbm.boundaries``. A new rule is
its module plus one line in :data:`RULES` (or one :func:`register` call, as ``tests/lbm/test_boundary_plugin.py``
shows). The order of :data:`RULES` is the order the step kernels test a link's source flag in; the last rule is what
remains.
"""

from __future__ import annotations

import importlib

from hpcsolve.lbm.flags import FLUID

#: the shipped rules, in the order the step kernels test the flag of a boundary link's source cell
RULES: list[str] = [
    "hpcsolve.lbm.boundaries.wall:RULE",
    "hpcsolve.lbm.boundaries.velocity:RULE",
    "hpcsolve.lbm.boundaries.outlet:RULE",
]

_extra: list = []        # rules registered as objects (plugins outside the package, tests)
_loaded: dict[str, object] = {}


class BoundaryRule:
    """What a boundary rule provides (see the module docstring); a rule module subclasses it and sets ``name``,
    ``flag`` and ``sides``."""

    name: str = ""
    flag: int = -1
    sides: tuple[str, ...] = ()
    #: True where the kernel piece reads the fluid cell's own velocity at t (``Op("own_velocity")``): in-place
    #: streaming keeps it in a table for the fluid cells next to the rule's cells (``inplace.own_velocity_cells``)
    needs_own_velocity: bool = False

    def kernel_piece(self, characteristic: bool = False):
        """The rule's ``kernel_plan.LinkRule`` (``characteristic``: the outlet's compiled variant)."""
        raise NotImplementedError

    def numpy_links(self, setup, P, sources, fluid):
        """The NumPy reference on the links whose source x - c_i has this rule's flag; None: the gather is the rule.
        ``sources`` (9, n_fluid): the flat source cell x - c_i of every pulled population, ``fluid`` the fluid cells."""
        return None

    def looks_up(self, setup) -> bool:
        """True where the rule's kernel piece looks up its cells' boundary velocity (the velocity table)."""
        return False

    def side_velocity(self, kind: str, side: str, case, n: int):
        """The boundary velocity (lattice units) of the domain side ``side`` ("left", "right", "bottom", "top") whose
        case name is ``kind`` (one of :attr:`sides`), from ``case``: ``("tangential", value)`` along the whole side,
        ``("normal", values)`` over its ``n`` fluid cells, or None (at rest)."""
        return None

    def force_terms(self, setup, links):
        """The momentum-exchange force of the links into this rule's cells of a measured mask: ``links``
        (``boundaries.force.MaskLinks``: ``direction`` i, fluid cell ``cell`` x, boundary cell ``boundary`` x + c_i,
        flat int64 arrays) -> ``(m, k)`` float64 arrays, one value per link, for the link's force
        c_i (m h_i(x) + k) with h the stored shifted post-collision population; None (the default): the rule exerts
        no force that the momentum exchange counts, its links are left out."""
        return None


def _load(target: str):
    if target not in _loaded:
        module, attr = target.split(":")
        _loaded[target] = getattr(importlib.import_module(module), attr)
    return _loaded[target]


def rules() -> tuple[BoundaryRule, ...]:
    """The registered rules, in kernel order (:data:`RULES`, then those :func:`register` added)."""
    return tuple(_load(t) for t in RULES) + tuple(_extra)


def register(rule: BoundaryRule) -> BoundaryRule:
    """Add ``rule`` (a :class:`BoundaryRule`) after the registered ones; its flag must be new. Returns it.
    Register before the first kernel source is generated: the emitters cache sources by their arguments
    (``emit_cuda.kernel_source``), not by the registry."""
    taken = {r.flag for r in rules()} | {FLUID}
    if rule.flag in taken or not 0 < rule.flag < 0x80:
        raise ValueError(f"boundary rule {rule.name!r}: flag {rule.flag} is taken or outside 1..127 (taken: "
                         f"{sorted(taken)})")
    _extra.append(rule)
    return rule


def unregister(rule: BoundaryRule) -> None:
    """Remove a rule :func:`register` added."""
    _extra.remove(rule)


def link_rules(characteristic: bool = False) -> tuple:
    """The step kernels' rules (``kernel_plan.LinkRule``) in the order they test the flag (the last one is what
    remains); ``characteristic``: the outlet looks up its reference outflow (``outlet.characteristic_outlet``)."""
    return tuple(r.kernel_piece(characteristic) for r in rules())


def flag_names() -> dict[int, str]:
    """Every valid cell flag and its name: fluid and each rule's."""
    return {FLUID: "fluid", **{r.flag: r.name for r in rules()}}


def side_rules() -> dict[str, BoundaryRule]:
    """The rule of each case side name (``boundaries.left = "wall"`` -> the wall rule, ...)."""
    return {side: r for r in rules() for side in r.sides}


def side_flags() -> dict[str, int]:
    """The flag of each case side name a rule implements (``boundaries.left = "wall"`` -> WALL, ...)."""
    return {side: r.flag for side, r in side_rules().items()}


def side_names() -> tuple[str, ...]:
    """Every case name a domain side may take now: ``"periodic"`` and each registered rule's (read at validation
    time by the case schema, so a rule :func:`register` added is accepted)."""
    return ("periodic",) + tuple(side_rules())


def own_velocity_flags() -> tuple[int, ...]:
    """The flags whose rules read the fluid cell's own velocity (:attr:`BoundaryRule.needs_own_velocity`)."""
    return tuple(r.flag for r in rules() if r.needs_own_velocity)


def lookup_flags(setup) -> tuple[int, ...]:
    """The flags whose cells go into the kernels' velocity table (:meth:`BoundaryRule.looks_up`)."""
    return tuple(r.flag for r in rules() if r.looks_up(setup))
