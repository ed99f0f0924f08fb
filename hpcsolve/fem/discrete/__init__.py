"""The FEM's discretization: meshes, P1 assembly, the problems (Poisson, elasticity) and test problems."""
