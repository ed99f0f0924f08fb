"""A boundary rule is a plugin: one object (``hpcsolve.lbm.rules.BoundaryRule``) in one file, registered with one
line, and every part of the package that handles boundary rules picks it up: the cell-flag check of ``LBMSetup``,
the geometry's side names, the case schema's side names (read at validation time), the NumPy reference's links,
the velocity table of the GPU steppers, the kernel pieces both emitters write into every step layout and the
momentum-exchange force (``boundaries.force``, the rule's ``force_terms``).

The example rule, defined in this file and nowhere else: a **reservoir**, a boundary cell at rest that holds the
density 1 + drho_w (anti-bounce-back with u_w = 0: f_i = -f*_opp(i) + 2 w_i rho_w, shifted
h_i = -h*_opp(i) + 2 w_i drho_w; ``physics.pressure_anti_bounce_back`` at zero velocity). drho_w rides in the
cell's boundary velocity (x component), so the kernels look it up in the velocity table as the characteristic
outlet looks up its reference outflow. Two reservoirs at different densities drive a plane Poiseuille flow
between resting walls; its measured profile is the analytic parabola u(y) = (dp/dx) y (H - y) / (2 nu). Its force
term: c_i (f*_i + f_opp(i)(t + 1)) = c_i 2 w_i (1 + drho_w) (m = 0, k = 2 w_i rho_w: the pressure of the reservoir),
which at the steady state balances the walls' friction.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from hpcsolve.core.cases import load_case
from hpcsolve.core.errors import CaseError
from hpcsolve.core.precision import FP64
from hpcsolve.lbm import lattice, physics, rules
from hpcsolve.lbm import geometry
from hpcsolve.lbm.boundaries.force import force_links
from hpcsolve.lbm.boundaries.links import ReferenceLinks
from hpcsolve.lbm.case import derive
from hpcsolve.lbm.flags import WALL
from hpcsolve.lbm.kernels import emit_numba
from hpcsolve.lbm.kernels.kernel_plan import LinkRule, Op
from hpcsolve.lbm.steppers.kernels_numpy import NumpyStepper
from hpcsolve.lbm.steppers.stepper import LBMSetup
from hpcsolve.lbm.boundaries.velocity import velocity_table

RESERVOIR = 4     # the example rule's own flag code (the shipped ones are 0..3)


class ReservoirLinks(ReferenceLinks):
    """The reference: the links from reservoir cells (``ReferenceLinks``: ``ux`` = the cell's drho_w)."""

    def __init__(self, setup, P, sources):
        super().__init__(setup, P, sources, RESERVOIR)
        self.zero = np.zeros_like(self.w)

    def apply(self, P, flat, own_h=None) -> None:
        if self.pos.size:
            flat[self.pos] = P.pressure_anti_bounce_back(flat[self.pos], self.w, self.cx, self.cy, self.zero,
                                                         self.zero, self.ux)


class Reservoir(rules.BoundaryRule):
    """Anti-bounce-back at rest at the density 1 + (the cell's boundary velocity x) (the example rule)."""

    name, flag, sides = "reservoir", RESERVOIR, ("reservoir",)
    PIECE = LinkRule("reservoir", RESERVOIR, (
        Op("lookup", out=("drho_w", "unused"), args=("s",)),
        Op("physics", "pressure_anti_bounce_back", ("h",), ("hop", "w_i", "cx_i", "cy_i", "ZERO", "ZERO", "drho_w"))))

    def kernel_piece(self, characteristic: bool = False) -> LinkRule:
        return self.PIECE

    def numpy_links(self, setup, P, sources, fluid):
        return ReservoirLinks(setup, P, sources)

    def looks_up(self, setup) -> bool:
        return True

    def force_terms(self, setup, links):
        """m = 0, k = 2 w_i (1 + drho_w): anti-bounce-back at rest returns -f*_i + 2 w_i rho_w."""
        w = np.asarray(lattice.WEIGHTS)[links.direction]
        drho = setup.boundary_velocity.reshape(2, -1)[0][links.boundary]
        return np.zeros_like(w), 2.0 * w * (1.0 + drho)


@pytest.fixture
def reservoir():
    rule = rules.register(Reservoir())          # the one registration line
    try:
        yield rule
    finally:
        rules.unregister(rule)


def _channel(nx: int = 18, ny: int = 10, drho: float = 1e-3, tau: float = 0.8):
    """Reservoirs left (drho) and right (0), resting walls at the bottom and top: (setup, fluid length L, height H)."""
    flags = np.zeros((ny, nx), np.uint8)
    flags[:, 0] = flags[:, -1] = RESERVOIR
    flags[0, :] = flags[-1, :] = WALL
    bv = np.zeros((2, ny, nx))
    bv[0, :, 0] = drho
    return LBMSetup(flags, tau, collision="trt", policy=FP64, boundary_velocity=bv), nx - 2, ny - 2


def test_a_rule_defined_in_one_file_is_picked_up_everywhere(reservoir):
    """Registered, the rule is known to every consumer, and it lives in this one file."""
    assert inspect.getsourcefile(type(reservoir)) == __file__            # files touched for the rule: this one
    assert rules.flag_names()[RESERVOIR] == "reservoir"
    assert rules.side_flags()["reservoir"] == RESERVOIR                   # the geometry's side names
    assert rules.link_rules()[-1] is Reservoir.PIECE                      # the emitters' pieces, last in order
    setup, _, _ = _channel()                                              # LBMSetup accepts the flag
    cells, uw = velocity_table(setup, np.float64)                         # the GPU steppers' lookup table
    assert np.count_nonzero(uw[0] == 1e-3) == setup.flags.shape[0] - 2   # the left reservoir's rows (not corners)
    source = emit_numba.kernel_source(FP64, "trt")                        # the piece in the generated kernels:
    assert "fs == 3" in source                                            # the outlet is tested, no longer the rest
    assert source.count("pressure_anti_bounce_back(hop, W1, CX1, CY1, ZERO, ZERO, drho_w)") == 1   # link 1, lbm_step
    assert isinstance(NumpyStepper(setup).rule_links[-1], ReservoirLinks)  # the NumPy reference
    ny, nx = setup.flags.shape                                            # the force terms (what GPUs reduce):
    left = setup.flags == RESERVOIR
    left[:, 1:] = False
    pos, cx, cy, m, k = force_links(setup, left)                          # 3 links a row, 2 in the rows at a wall
    assert pos.size == 3 * (ny - 2) - 2 and np.all(m == 0) and np.all(cx == -1)
    np.testing.assert_allclose(k[cy == 0], 2 / 9 * (1 + 1e-3), rtol=1e-15)


def _reservoir_case(*sides):
    return load_case("cases/lid_driven_cavity.toml", ["validation.reference=none", *sides])


def test_the_case_schema_reads_the_registry_when_it_validates(reservoir):
    """Registered after the schema was built, the rule's case name is a side name: the case loads and its geometry
    has the rule's flag on those sides; an unknown name is refused naming the field, the value and every name."""
    case = _reservoir_case("boundaries.left=reservoir", "boundaries.right=reservoir")
    assert (case.boundaries.left, case.boundaries.right) == ("reservoir", "reservoir")
    flags = geometry.build(case, derive(case)).flags
    assert np.all(flags[1:-1, 0] == RESERVOIR) and np.all(flags[1:-1, -1] == RESERVOIR)
    with pytest.raises(CaseError) as err:
        _reservoir_case("boundaries.left=reservior")
    assert (err.value.field, err.value.value) == ("boundaries.left", "reservior")
    for name in ("periodic", "wall", "moving_wall", "inlet", "outlet", "reservoir"):
        assert repr(name) in err.value.allowed and repr(name) in str(err.value)


def test_unregistered_the_case_name_is_refused():
    with pytest.raises(CaseError, match="boundaries.left: got 'reservoir'; allowed: 'periodic', 'wall'"):
        _reservoir_case("boundaries.left=reservoir")


def test_unregistered_the_flag_is_refused():
    with pytest.raises(Exception, match="flags"):
        _channel()


def test_two_reservoirs_drive_the_poiseuille_profile(reservoir):
    """Reservoirs at drho = 1e-3 and 0 across L = 16 fluid cells, H = 8, TRT (Lambda = 3/16: the walls exactly
    half-way), 3,000 steps (steady to 1e-15). Seen: the mass flux sum(rho u) of every column equal to 6e-14, the
    density half-way along 1 + 0.494e-3 (the reservoirs hold their densities symmetrically), the pressure gradient
    there 6.59e-5 per cell (5 % above drho / L: the reservoirs' entrance regions), and the velocity profile there
    the parabola u(y) = c_s^2 (-drho/dx) y (H - y) / (2 rho nu) of that gradient to 0.05 %."""
    drho = 1e-3
    setup, L, H = _channel(drho=drho)
    st = NumpyStepper(setup)
    st.step(3000)
    rho, ux, _ = st.macroscopic()
    flux = (rho * ux)[1:-1, 1:-1].sum(axis=0)
    assert flux.min() > 0 and flux.max() / flux.min() - 1 < 1e-10
    c = setup.flags.shape[1] // 2                       # the faces between fluid columns c - 1 and c: half-way along
    mid_rho = rho[1:-1, c - 1:c + 1].mean()
    assert mid_rho - 1 == pytest.approx(drho / 2, rel=0.02)
    gradient = (rho[1:-1, c - 1] - rho[1:-1, c]).mean()
    assert gradient == pytest.approx(drho / L, rel=0.1)
    nu = physics.viscosity_from_tau(setup.relaxation_time)
    y = np.arange(H) + 0.5
    exact = lattice.CS2 * gradient / (2 * mid_rho * nu) * y * (H - y)
    measured = 0.5 * (ux[1:-1, c - 1] + ux[1:-1, c])
    np.testing.assert_allclose(measured, exact, rtol=2e-3)
    # the forces the run reports (the stepper's momentum exchange): each reservoir pushes with its pressure
    # rho_w c_s^2 on its 3 H - 2 links (k = 2 w_i rho_w), and at the steady state the walls' friction (the built-in
    # rule's term, from the state) balances the pressure drop, the fluid's momentum unchanged
    column = setup.flags == RESERVOIR                  # the left reservoir (the corners are walls)
    column[:, 1:] = False
    f_left, f_right = np.array(st.force(column)), np.array(st.force(column[:, ::-1]))
    f_walls = np.array(st.force(setup.flags == WALL))
    np.testing.assert_allclose(f_left, [-(1 + drho) * (H - 1 / 3) / 3, 0.0], rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(f_right, [(H - 1 / 3) / 3, 0.0], rtol=1e-14, atol=1e-15)
    assert f_walls[0] == pytest.approx(drho * (H - 1 / 3) / 3, rel=1e-9)
    np.testing.assert_allclose(f_left + f_right + f_walls, 0.0, atol=1e-14)
