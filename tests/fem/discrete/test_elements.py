"""Reference elements and quadrature rules (hpcsolve.fem.discrete.elements): each rule integrates every monomial up
to its degree exactly and misses one of the next degree; each basis is nodal, a partition of unity, and its
gradients are those of the basis (central differences)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from hpcsolve.core.errors import CaseError
from hpcsolve.fem.discrete.elements import ELEMENTS, element, quadrature, quadrature_rule, reference_volume


def monomial_integral(alpha) -> float:
    """int over the reference simplex of prod xi_i^alpha_i = prod alpha_i! / (|alpha| + d)!."""
    return math.prod(math.factorial(a) for a in alpha) / math.factorial(sum(alpha) + len(alpha))


def worst_error(points, weights, degree: int) -> float:
    """Largest error of the rule over all monomials of total degree exactly ``degree``."""
    d = points.shape[1]
    worst = 0.0
    for alpha in itertools.product(range(degree + 1), repeat=d):
        if sum(alpha) == degree:
            approx = float(weights @ np.prod(points ** np.array(alpha), axis=1))
            worst = max(worst, abs(approx - monomial_integral(alpha)))
    return worst


# every tabulated rule (2D: 1, 2, 4, 5, 6; 3D: 1, 2, 5, 6) and conical / Gauss rules above them
ORDERS = [(1, 1), (1, 4), (1, 7), (2, 1), (2, 2), (2, 3), (2, 5), (2, 6), (2, 7), (2, 9), (3, 1), (3, 2), (3, 4),
          (3, 6), (3, 7), (3, 8)]


@pytest.mark.parametrize("dim,order", ORDERS)
def test_quadrature_is_exact_to_its_degree_and_not_beyond(dim, order):
    rule = quadrature_rule(dim, order)
    points, weights = quadrature(dim, order)
    assert rule.degree >= order
    assert np.all(weights > 0) and np.all(points > 0) and np.all(points.sum(axis=1) < 1)   # positive, interior
    assert weights.sum() == pytest.approx(reference_volume(dim), rel=1e-14)
    assert max(worst_error(points, weights, p) for p in range(rule.degree + 1)) < 1e-15
    # the claim is tight: some monomial one degree above is missed
    assert worst_error(points, weights, rule.degree + 1) > 1e-8


def test_quadrature_rejects_what_it_cannot_give():
    with pytest.raises(CaseError, match="dim 1, 2 or 3"):
        quadrature(4, 2)
    with pytest.raises(ValueError, match="integer order"):
        quadrature(2, -1)


def test_element_lookup_names_what_exists():
    assert element(2, 2).name == "P2-triangle" and element(3, 1).name == "P1-tetrahedron"
    assert [ELEMENTS[n].n_local for n in ("P1-triangle", "P2-triangle", "P1-tetrahedron", "P2-tetrahedron")] == \
        [3, 6, 4, 10]
    with pytest.raises(ValueError, match="P2-tetrahedron") as info:
        element(3, 3)
    assert "degree 3" in str(info.value)


@pytest.mark.parametrize("name", sorted(ELEMENTS))
def test_basis_is_nodal_and_a_partition_of_unity(name):
    el = ELEMENTS[name]
    assert np.allclose(el.basis(el.nodes), np.eye(el.n_local), atol=1e-15)
    xi = np.random.default_rng(3).dirichlet(np.ones(el.dim + 1), size=20)[:, :el.dim]
    assert np.allclose(el.basis(xi).sum(axis=1), 1.0, atol=1e-14)
    assert np.allclose(el.grad(xi).sum(axis=1), 0.0, atol=1e-13)


@pytest.mark.parametrize("name", sorted(ELEMENTS))
def test_gradients_match_central_differences(name):
    el = ELEMENTS[name]
    xi = np.random.default_rng(4).dirichlet(np.ones(el.dim + 1), size=7)[:, :el.dim]
    h = 1e-6
    fd = np.stack([(el.basis(xi + h * e) - el.basis(xi - h * e)) / (2 * h) for e in np.eye(el.dim)], axis=2)
    assert el.grad(xi).shape == (7, el.n_local, el.dim)
    assert np.abs(el.grad(xi) - fd).max() < 1e-8


def test_p2_reproduces_quadratics_and_nodes_follow_the_simplex_edges():
    """A quadratic is interpolated exactly: sum_i q(node_i) phi_i = q, at random points."""
    el = element(3, 2)
    q = lambda p: 1 + p[:, 0] - 2 * p[:, 1] * p[:, 2] + 3 * p[:, 0] ** 2      # noqa: E731
    xi = np.random.default_rng(5).dirichlet(np.ones(4), size=9)[:, :3]
    assert np.allclose(el.basis(xi) @ q(el.nodes), q(xi), atol=1e-14)
    assert el.nodes[4:].tolist() == [[0.5, 0, 0], [0.5, 0.5, 0], [0, 0.5, 0], [0, 0, 0.5], [0.5, 0, 0.5],
                                     [0, 0.5, 0.5]]                            # edges 01, 12, 02, 03, 13, 23
