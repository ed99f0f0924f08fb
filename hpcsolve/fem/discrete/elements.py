"""Reference Lagrange elements on simplices (P1 and P2 on intervals, triangles and tetrahedra) and quadrature rules.

An :class:`Element` is the reference simplex of dimension d (vertices 0, e_1, ..., e_d) with its nodal basis, written
once for every dimension through the barycentric coordinates lambda_0 = 1 - sum(xi), lambda_i = xi_i:

- P1: phi_i = lambda_i;
- P2: phi_i = lambda_i (2 lambda_i - 1) at the vertices, then phi_e = 4 lambda_a lambda_b at the midpoint of every
  edge (a, b), in the local edge order of :mod:`hpcsolve.fem.discrete.simplex` (VTK / meshio ``line3``,
  ``triangle6``, ``tetra10``), so a DOF map's cell columns and an element's local functions agree.

The interval elements exist as the facets of the triangles (a boundary flux integrated against a facet's basis).
``basis`` and ``grad`` take the reference points of whatever array module they are given (NumPy or CuPy).

``quadrature(dim, order)`` returns points on the reference simplex and weights summing to its volume 1/d!, exact for
every polynomial of total degree <= order: the symmetric rules tabulated below where one of that degree or more is
known with positive weights and interior points, else a conical-product (collapsed Gauss-Legendre) rule, positive for
any order.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from hpcsolve.core.backends import get_array_module
from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete.simplex import EDGES

#: local vertex pairs of the edges of the reference simplex, per dimension (the interval has one, its own)
_EDGES = {1: np.array([[0, 1]]), 2: EDGES[2], 3: EDGES[3]}
_SHAPES = {1: "interval", 2: "triangle", 3: "tetrahedron"}


def reference_volume(dim: int) -> float:
    """Measure of the reference simplex: 1, 1/2, 1/6."""
    return 1.0 / math.factorial(dim)


@dataclass(frozen=True)
class Element:
    """A Lagrange element on the reference simplex: ``nodes`` (n_local, dim) are the reference coordinates of its
    local DOFs (vertices, then edge midpoints for P2), the points where ``basis`` is the Kronecker delta."""

    name: str
    dim: int
    degree: int
    n_local: int
    nodes: np.ndarray = field(compare=False, repr=False)

    def _barycentric(self, xi):
        """(q, d + 1) barycentric coordinates and (d + 1, d) their constant reference gradients."""
        xp = get_array_module(xi)
        xi = xp.asarray(xi, dtype=xp.float64).reshape(-1, self.dim)
        lam = xp.concatenate([1.0 - xi.sum(axis=1, keepdims=True), xi], axis=1)
        dlam = xp.concatenate([-xp.ones((1, self.dim)), xp.eye(self.dim)], axis=0)
        return lam, dlam

    def basis(self, xi):
        """(q, n_local) values of the local basis functions at reference points xi (q, dim)."""
        xp = get_array_module(xi)
        lam, _ = self._barycentric(xi)
        if self.degree == 1:
            return lam
        edges = _EDGES[self.dim]
        return xp.concatenate([lam * (2.0 * lam - 1.0), 4.0 * lam[:, edges[:, 0]] * lam[:, edges[:, 1]]], axis=1)

    def grad(self, xi):
        """(q, n_local, dim) reference gradients d phi_i / d xi at reference points xi (q, dim)."""
        xp = get_array_module(xi)
        lam, dlam = self._barycentric(xi)
        q = lam.shape[0]
        if self.degree == 1:
            return xp.broadcast_to(dlam[None], (q, self.dim + 1, self.dim)).copy()
        a, b = _EDGES[self.dim][:, 0], _EDGES[self.dim][:, 1]
        vertex = (4.0 * lam - 1.0)[:, :, None] * dlam[None]
        edge = 4.0 * (lam[:, a, None] * dlam[None, b] + lam[:, b, None] * dlam[None, a])
        return xp.concatenate([vertex, edge], axis=1)

    def facet(self) -> "Element":
        """The element of the same degree on a facet (an edge of a triangle, a face of a tetrahedron), whose local
        order is a DofMap's ``facet_dofs`` order."""
        return element(self.dim - 1, self.degree)

    @property
    def reference_volume(self) -> float:
        return reference_volume(self.dim)


def _lagrange(dim: int, degree: int) -> Element:
    vertices = np.vstack([np.zeros((1, dim)), np.eye(dim)])
    nodes = vertices if degree == 1 else np.vstack([vertices, 0.5 * vertices[_EDGES[dim]].sum(axis=1)])
    nodes.setflags(write=False)
    return Element(f"P{degree}-{_SHAPES[dim]}", dim, degree, len(nodes), nodes)


#: every element, by name ("P1-triangle", "P2-tetrahedron", ...)
ELEMENTS = {el.name: el for el in (_lagrange(d, p) for d in (1, 2, 3) for p in (1, 2))}


def element(dim: int, degree: int) -> Element:
    """The Lagrange element of this degree on the simplex of this dimension."""
    for el in ELEMENTS.values():
        if el.dim == dim and el.degree == degree:
            return el
    allowed = ", ".join(f"(dim {el.dim}, degree {el.degree}: {el.name})" for el in ELEMENTS.values())
    raise CaseError.invalid("element", f"dim {dim}, degree {degree}", allowed)


# ------------------------------------------------------------------------------------------------ quadrature


@dataclass(frozen=True)
class QuadratureRule:
    """Points (q, dim) on the reference simplex, weights (q,) summing to its volume, exact up to total ``degree``."""

    dim: int
    degree: int
    points: np.ndarray = field(repr=False)
    weights: np.ndarray = field(repr=False)
    source: str = ""


def _orbits(dim: int, orbits) -> tuple[np.ndarray, np.ndarray]:
    """Expand symmetric orbits (barycentric generator, weight) into points (reference coordinates) and weights."""
    pts, wts = [], []
    for bary, w in orbits:
        full = list(bary) + [1.0 - sum(bary)]
        # a coordinate equal to another up to round-off (the centroid's last) must not make a new point
        unique = {tuple(np.round(p, 12)): p for p in itertools.permutations(full)}
        perms = np.array([unique[k] for k in sorted(unique)])
        pts.append(perms[:, 1:])
        wts.append(np.full(len(perms), w))
    return np.vstack(pts), np.concatenate(wts)


_S15 = math.sqrt(15.0)
_S5 = math.sqrt(5.0)
#: (degree, source, orbits): an orbit is (the first dim barycentric coordinates of one point, the weight of each of
#: its permutations); weights sum to the reference volume. Digits of the non-closed-form rules were refined by Newton
#: on the moment equations, and tests/fem/discrete/test_elements.py checks every rule's degree.
_TABLE = {
    2: [(1, "centroid (midpoint) rule", [((1 / 3, 1 / 3), 1 / 2)]),
        (2, "3-point interior rule, Strang & Fix (1973), table 4.1", [((1 / 6, 1 / 6), 1 / 6)]),
        (4, "6-point rule, Strang & Fix (1973) / Dunavant (1985), degree 4",
         [((0.4459484909159648, 0.4459484909159648), 0.1116907948390056),
          ((0.0915762135097709, 0.0915762135097709), 0.05497587182766106)]),
        (5, "7-point rule of Radon (1948), closed form (Strang & Fix 1973; Dunavant 1985)",
         [((1 / 3, 1 / 3), 9 / 80),
          (((6 - _S15) / 21, (6 - _S15) / 21), (155 - _S15) / 2400),
          (((6 + _S15) / 21, (6 + _S15) / 21), (155 + _S15) / 2400)]),
        (6, "12-point rule, Dunavant (1985), degree 6",
         [((0.24928674517090524, 0.24928674517090524), 0.058393137863194174),
          ((0.06308901449150299, 0.06308901449150299), 0.025422453185103937),
          ((0.05314504984481314, 0.3103524510337876), 0.04142553780918429)])],
    3: [(1, "centroid (midpoint) rule", [((0.25, 0.25, 0.25), 1 / 6)]),
        (2, "4-point rule, Keast (1986) no. 2", [(((5 - _S5) / 20,) * 3, 1 / 24)]),
        (5, "14-point rule with positive weights (orbits S31, S31, S22), e.g. Walkington (2000)",
         [((0.0927352503108912,) * 3, 0.01224884051939366),
          ((0.3108859192633006,) * 3, 0.01878132095300264),
          ((0.0455037041256496, 0.0455037041256496, 0.4544962958743504), 0.007091003462846911)]),
        (6, "24-point rule with positive weights, Keast (1986), degree 6",
         [((0.04067395853461142,) * 3, 0.0016795351758867893),
          ((0.3223378901422772,) * 3, 0.009226196923941806),
          ((0.21460287125915437,) * 3, 0.006653791709694966),
          ((0.06366100187501808, 0.06366100187501808, 0.6030056647916477), 0.008035714285714366)])],
}


@lru_cache(maxsize=None)
def _tabulated(dim: int) -> tuple[QuadratureRule, ...]:
    rules = []
    for degree, source, orbits in _TABLE.get(dim, []):
        pts, wts = _orbits(dim, orbits)
        rules.append(QuadratureRule(dim, degree, pts, wts, source))
    return tuple(rules)


@lru_cache(maxsize=None)
def _conical(dim: int, order: int) -> QuadratureRule:
    """Collapsed (Duffy) tensor Gauss-Legendre rule on [0, 1]^dim mapped to the simplex: xi_1 = u_1,
    xi_k = u_k prod_{j<k} (1 - u_j). A monomial of degree n becomes a polynomial of degree n + dim - k in u_k (the
    Jacobian prod_j (1 - u_j)^(dim - j) included), integrated exactly by ceil((n + dim - k + 1) / 2) points; all
    weights positive (Stroud 1971, conical product rules)."""
    axes = []
    for k in range(1, dim + 1):
        g, w = np.polynomial.legendre.leggauss((order + dim - k) // 2 + 1)
        axes.append((0.5 * (g + 1.0), 0.5 * w))
    u = np.stack(np.meshgrid(*[a[0] for a in axes], indexing="ij"), axis=-1).reshape(-1, dim)
    w = np.prod(np.stack(np.meshgrid(*[a[1] for a in axes], indexing="ij"), axis=-1).reshape(-1, dim), axis=1)
    xi = np.empty_like(u)
    scale = np.ones(len(u))
    for k in range(dim):
        xi[:, k] = u[:, k] * scale
        w = w * scale if k > 0 else w
        scale = scale * (1.0 - u[:, k])
    return QuadratureRule(dim, order, xi, w, "conical product of Gauss-Legendre rules (Stroud 1971)")


def quadrature_rule(dim: int, order: int) -> QuadratureRule:
    """The cheapest rule here exact for total degree <= order on the reference simplex of dimension dim (1, 2, 3);
    order 0 is treated as 1."""
    if dim not in (1, 2, 3) or int(order) != order or order < 0:
        raise CaseError.invalid("quadrature", f"dim {dim}, order {order}", "dim 1, 2 or 3 and an integer order >= 0")
    order = max(int(order), 1)
    for rule in _tabulated(dim):
        if rule.degree >= order:
            return rule
    if dim == 1:
        g, w = np.polynomial.legendre.leggauss(order // 2 + 1)
        return QuadratureRule(1, 2 * (order // 2) + 1, (0.5 * (g + 1.0))[:, None], 0.5 * w, "Gauss-Legendre")
    return _conical(dim, order)


def quadrature(dim: int, order: int) -> tuple[np.ndarray, np.ndarray]:
    """(points (q, dim), weights (q,)) on the reference simplex, weights summing to 1/dim!, exact for polynomials of
    total degree <= order. Sources: Strang & Fix (1973), Dunavant (1985, Int. J. Numer. Meth. Eng. 21), Keast (1986,
    Comput. Methods Appl. Mech. Eng. 55), the 14-point degree-5 tetrahedral rule, and conical products (Stroud
    1971) above the tabulated degrees; each rule's ``source`` says which (``quadrature_rule``)."""
    rule = quadrature_rule(dim, order)
    return rule.points.copy(), rule.weights.copy()
