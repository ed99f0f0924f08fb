"""Cell flags of the D2Q9 lattice, defined once (``stepper`` re-exports them).

One uint8 per cell of the (ny, nx) grid. The domain always wraps periodically; a side that should
not be periodic has a layer of non-fluid cells. Boundaries lie half-way between a fluid cell and a
non-fluid neighbour. Non-fluid cells are never updated. This module imports nothing, so every other
LBM module (geometry, the Bouzidi links, the kernels) can take the codes from here.
"""

FLUID = 0      #: updated every step
WALL = 1       #: resting wall: half-way bounce-back
VELOCITY = 2   #: moving wall or velocity inlet: bounce-back with the momentum term, u_w from boundary_velocity
OUTLET = 3     #: pressure outlet: anti-bounce-back with the adjacent fluid cell's own velocity at rho = 1, or
#: characteristic (rho from physics.outlet_density) where the cell's boundary velocity holds a reference outflow
FLAG_NAMES = {FLUID: "fluid", WALL: "wall", VELOCITY: "velocity", OUTLET: "outlet"}   # the shipped flags (rules.flag_names: all)
BOUNDARY_BIT = 0x80   #: the GPU steppers' device flags: set on fluid cells with a non-fluid neighbour (rule flags < 0x80)
