"""Generated input, at least 2,000 inputs per run of the default suite in seeded chunks (each a test of its own, a
few seconds long), in two families:

- bad input (issue 13): non-finite and extreme numbers, wrong types, deep nesting and long dotted keys, --set
  values, long values, mesh and mask files of every kind, geometries without fluid, FEM fields; each validated
  in-process through the command line: exit 0 with finite derived parameters, or exit 2 with one message naming a
  case field. A few valid small inputs of each chunk are also dry-run and run.
- solver options (issue 36): [solve] and [solve.multigrid] (every field, the documented edges included, and
  values outside them), FEM Dirichlet/Neumann selections that leave a system nearly or wholly singular, and LBM
  [boundaries] (sides, outlet rule, absorbing layer, smooth start), [time], [steady], [lattice] and [initial]
  options, with every precision, on small grids; each input is RUN: exit 0 (completed, converged or not_steady,
  finite fields, no more steps or iterations than it was given), exit 2 (one message naming a case field or
  command-line option) or exit 3 (not converged or blown up, said plainly); never a traceback or another exit.

Nothing is timed: a hang is what the outer limit of a chunk (CHUNK_LIMIT_S, many times a chunk's run time) reaches,
and work is counted instead (a run's steps and iterations). The chunks beyond the default ones are a soak
(``-m slow``; with the default ones about 10,000 inputs of each family). The generators are seeded
(HPCSOLVE_FUZZ_SEED, default 13; one stream per chunk) so a failure reproduces; the counts per class and the
outcomes are printed (pytest -s)."""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import math
import os
import random
import re
import signal
import struct
import sys
import tomllib
import typing
from collections import Counter
from pathlib import Path

import meshio
import numpy as np
import pytest
from pydantic import BaseModel

from hpcsolve import cli
from hpcsolve.core.results import read_result_folder
from hpcsolve.run import run_case
from tomlgen import to_toml

ROOT = Path(__file__).parent.parent
CASES = ROOT / "cases"
LBM = ["lid_driven_cavity", "cylinder_2d1", "poiseuille", "taylor_green"]
FEM = ["poisson_manufactured", "cook_membrane", "heat_plate_with_hole"]
SEED = int(os.environ.get("HPCSOLVE_FUZZ_SEED", "13"))
# chunks of the seeded input streams: the default suite runs the first DEFAULT_* of each family, the soak (-m slow)
# the rest; sizes keep a chunk near 10 s on a quiet 2-core machine
BAD_CHUNK, BAD_CHUNKS, DEFAULT_BAD_CHUNKS = 300, 34, 2             # bad input (validated): 600 / 10,200
SOLVER_CHUNK, SOLVER_CHUNKS, DEFAULT_SOLVER_CHUNKS = 200, 50, 10   # solver options (run): 2,000 / 10,000
RUNS = 12                    # valid small bad-input inputs of a chunk that are also run
DRY_RUNS = 3                 # and dry-run (its probe steps or solves for a fraction of a second on a small grid)
CLI_EVERY = 10               # every 10th solver-options input runs through `hpcsolve run --out` (a result folder)
# the outer limit of one chunk: only a real hang reaches it (a chunk runs about 10 s, 30 s on a loaded machine)
CHUNK_LIMIT_S = 600

BAD_NUMBERS = [math.inf, -math.inf, math.nan, 1e308, -1e308, 5e-324, 1e-300, 1e300, 0.0, -0.0, -1.0, 0.5,
               2**63, 2**70, -(2**70), 10**30, 1e16, 64.0, 3, 1, -7]
BAD_OTHERS = ["400", "yes", "", True, False, [1, 2], [math.nan, math.nan], {"a": 1}, "x" * 10_000,
              "a\nb", "inf", [[[[1]]]], [], "fp8", "cupy", "\x00", "é" * 50, [1.0, 2.0, 3.0]]


# ------------------------------------------------------------------------------------------------
# what a message must name: a field of the case schema (list items as [i]) or a command-line name

def _schema_paths() -> set[str]:
    from hpcsolve.fem.case import FEMCase
    from hpcsolve.lbm.case import LBMCase

    def walk(model, prefix):
        for name, f in model.model_fields.items():
            path = prefix + name
            yield path
            for a in (f.annotation, *typing.get_args(f.annotation)):
                for b in (a, *typing.get_args(a)):
                    if isinstance(b, type) and issubclass(b, BaseModel) and b is not model:
                        is_list = typing.get_origin(a) is list
                        yield from walk(b, path + ("[]." if is_list else "."))

    return set(walk(LBMCase, "")) | set(walk(FEMCase, "")) | {"--set", "case", "--out", "--resume", "physics",
                                                               "lattice", "mesh", "time", "boundaries",
                                                               "precision", "backend"}   # --precision, --backend


SCHEMA = _schema_paths()
FIELD = re.compile(r"(--set|--out|--resume|[A-Za-z_]+(?:\[\d*\])?(?:\.[A-Za-z_]+(?:\[\d*\])?)*)")


def names_a_field(message: str) -> bool:
    for m in FIELD.finditer(message):
        path = re.sub(r"\[\d+\]", "[]", m.group(1))
        if path in SCHEMA or path.removesuffix("[]") in SCHEMA:
            return True
    return False


# ------------------------------------------------------------------------------------------------
# TOML text of a (possibly mutated) case

def _leaves(data, prefix=()):
    """Paths to every scalar or array leaf (list items by index)."""
    items = data.items() if isinstance(data, dict) else enumerate(data)
    for k, v in items:
        if isinstance(v, dict) or (isinstance(v, list) and v and isinstance(v[0], dict)):
            yield from _leaves(v, prefix + (k,))
        else:
            yield prefix + (k,)


def _get(data, path):
    for k in path:
        data = data[k]
    return data


def _set(data, path, value):
    node = data
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value


# ------------------------------------------------------------------------------------------------
# files for mesh.path and obstacles[].file

def _npy_header(shape, descr="|b1") -> bytes:
    header = repr({"descr": descr, "fortran_order": False, "shape": tuple(shape)}).encode()
    header += b" " * (63 - (10 + len(header)) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


GMSH_NEGATIVE = """$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n4\n1 0 0 0\n2 1 0 0\n3 0 1 0\n4 1 1 0\n$EndNodes
$Elements\n2\n1 2 2 1 1 1 2 3\n2 2 2 1 1 2 4 -2\n$EndElements\n"""
GMSH_HUGE = "$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n1000000000000\n1 0 0 0\n$EndNodes\n"


def make_files(tmp: Path) -> dict[str, list[str]]:
    """Paths to offer as a mesh file and as a mask file: every kind the readers must refuse or read."""
    tmp.mkdir(parents=True, exist_ok=True)
    fifo = tmp / "pipe.msh"
    os.mkfifo(fifo)
    os.mkfifo(tmp / "pipe.npy")
    (tmp / "folder.msh").mkdir()
    (tmp / "empty.msh").write_bytes(b"")
    (tmp / "junk.msh").write_text("hello\nthis is not a mesh\n")
    (tmp / "binary.msh").write_bytes(bytes(range(256)) * 40)
    (tmp / "negative.msh").write_text(GMSH_NEGATIVE)
    (tmp / "huge.msh").write_text(GMSH_HUGE)
    (tmp / "header_only.msh").write_text("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n")
    (tmp / "text.vtk").write_text("# vtk DataFile Version 2.0\nnonsense\n")
    pts = np.array([[0, 0], [1, 0], [0, 1], [1, 1]], float)
    meshio.write(tmp / "ok.msh", meshio.Mesh(pts, [("triangle", np.array([[0, 1, 2], [1, 3, 2]]))]),
                 file_format="gmsh22")
    meshio.write(tmp / "degenerate.msh", meshio.Mesh(np.vstack([pts, [[2, 2]]]),
                                                     [("triangle", np.array([[0, 3, 4], [0, 1, 2]]))]),
                 file_format="gmsh22")
    # masks for the 64 x 64 fluid region of the cavity
    np.save(tmp / "mask_ok.npy", np.pad(np.ones((8, 8), bool), 28))
    np.save(tmp / "mask_all_solid.npy", np.ones((64, 64), bool))
    np.save(tmp / "mask_shape.npy", np.ones((10, 10), bool))
    np.save(tmp / "mask_object.npy", np.array([None] * 4096, dtype=object).reshape(64, 64), allow_pickle=True)
    np.save(tmp / "mask_float.npy", np.pad(np.full((4, 4), np.nan), 30))
    np.savez(tmp / "mask.npz", a=np.ones((64, 64), bool))
    (tmp / "mask_claims_1e16.npy").write_bytes(_npy_header((10**8, 10**8)) + b"\x01" * 64)
    (tmp / "mask_truncated.npy").write_bytes(_npy_header((64, 64)) + b"\x01" * 100)
    (tmp / "mask_bad_header.npy").write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': <<<}\n")
    (tmp / "mask_text.npy").write_text("not an array")
    common = [str(tmp / "missing.file"), "/dev/null", "/dev/zero", str(tmp / ("a" * 5000)),
              str(tmp / "folder.msh"), str(tmp / ("d" * 300) / "x"), "", "x\x00y"]
    meshes = common + [str(fifo)] + [str(tmp / n) for n in ("empty.msh", "junk.msh", "binary.msh", "negative.msh",
                                                            "huge.msh", "header_only.msh", "text.vtk", "ok.msh",
                                                            "degenerate.msh", "mask.npz")]
    masks = common + [str(tmp / "pipe.npy")] + [str(tmp / n) for n in (
        "mask_ok.npy", "mask_all_solid.npy", "mask_shape.npy", "mask_object.npy", "mask_float.npy", "mask.npz",
        "mask_claims_1e16.npy", "mask_truncated.npy", "mask_bad_header.npy", "mask_text.npy", "junk.msh")]
    return {"mesh": meshes, "mask": masks}


# ------------------------------------------------------------------------------------------------
# the generator: (class, argv for `hpcsolve validate`, case text or None)

class Generator:
    def __init__(self, seed: int, files: dict[str, list[str]]):
        self.rng = random.Random(seed)
        self.files = files
        self.base = {n: tomllib.loads((CASES / f"{n}.toml").read_text()) for n in LBM + FEM}

    def case(self, names=None):
        name = self.rng.choice(names or LBM + FEM)
        return name, json.loads(json.dumps(self.base[name]))

    def value(self):
        r = self.rng.random()
        if r < 0.55:
            return self.rng.choice(BAD_NUMBERS)
        if r < 0.85:
            return self.rng.choice(BAD_OTHERS)
        return self.rng.choice([float(f"1e{self.rng.randint(-320, 320)}"), -(10.0 ** self.rng.randint(-30, 30)),
                                self.rng.uniform(-2, 2), self.rng.randint(-5, 10**6)])

    def numbers(self):
        """class 1, 2, 6, 12: one to three leaves replaced by bad or extreme values."""
        name, data = self.case()
        leaves = list(_leaves(data))
        for _ in range(self.rng.randint(1, 3)):
            _set(data, self.rng.choice(leaves), self.value())
        return "numbers", name, data, []

    def structure(self):
        """class 3: deep nesting, long dotted keys, unknown keys, removed keys, huge names."""
        name, data = self.case()
        kind = self.rng.choice(["deep", "deep", "dotted", "unknown", "remove", "name"])
        leaves = list(_leaves(data))
        if kind == "deep":
            depth = self.rng.choice([17, 40, 200, 900])
            _set(data, self.rng.choice(leaves), "__DEEP__")
            return "nesting", name, to_toml(data).replace('"__DEEP__"', "[" * depth + "1" + "]" * depth), []
        if kind == "dotted":
            parts = self.rng.choice([17, 100, 2000])
            text = to_toml(data) + ".".join(["k"] * parts) + " = 1\n"
            return "nesting", name, text, []
        if kind == "unknown":
            data[self.rng.choice(["physics", "mesh", "solver_options", "x" * 500])] = {"speed": 3}
        elif kind == "remove":
            path = self.rng.choice(leaves)
            node = data
            for k in path[:-1]:
                node = node[k]
            del node[path[-1]]
        else:
            data["name"] = self.rng.choice(["x" * 10_000_000, "a b", "ok_name", "é", "..", "-"])
        return "structure", name, data, []

    def overrides(self):
        """class 2 (--set values are TOML values) and 3 (long keys): one to three --set arguments."""
        name, data = self.case()
        leaves = [".".join(map(str, p)) for p in _leaves(data) if all(isinstance(k, str) for k in p)]
        sets = []
        for _ in range(self.rng.randint(1, 3)):
            key = self.rng.choice(leaves + ["", "a..b", ".".join(["k"] * 20000), "physics.reynolds.x"])
            raw = self.rng.choice(["'400'", "400", "64.0", "true", "yes", "inf", "nan", "1e400", "-1",
                                   "400\nfoo", "400\n[table]", "\"a\nb\"", "[1, 2", "[" * 900 + "]" * 900,
                                   "{a = 1}", "\"" + "x" * 20_000 + "\"", "cupy", "0", "1e-320", "2**3"])
            sets += ["--set", f"{key}={raw}"]
        return "set", name, data, sets

    def file(self):
        """class 4: every kind of file as a mesh or a mask."""
        if self.rng.random() < 0.5:
            name, data = self.case(["heat_plate_with_hole"])
            data["mesh"]["path"] = self.rng.choice(self.files["mesh"])
            data["mesh"]["refine"] = 0
            return "files", name, data, []
        name, data = self.case(["lid_driven_cavity"])
        data["obstacles"] = [{"shape": "mask", "file": self.rng.choice(self.files["mask"])}]
        return "files", name, data, []

    def no_fluid(self):
        """class 5: obstacles that cover everything, or miss everything."""
        name, data = self.case(["lid_driven_cavity", "cylinder_2d1"])
        shape = self.rng.choice(["circle", "rectangle", "mask"])
        if shape == "circle":
            ob = {"shape": "circle", "center": [self.rng.uniform(-1, 3), self.rng.uniform(-1, 3)],
                  "diameter": self.rng.choice([1e-6, 0.05, 10.0, 1e300])}
        elif shape == "rectangle":
            ob = {"shape": "rectangle", "lower": [-5.0, -5.0], "upper": [self.rng.choice([0.3, 50.0]), 50.0]}
        else:
            ob = {"shape": "mask", "file": self.rng.choice(self.files["mask"])}
        data["obstacles"] = [ob] * self.rng.randint(1, 2)
        return "no_fluid", name, data, []

    def scaled(self):
        """valid-looking inputs: numbers scaled by modest to large factors (many validate and run)."""
        name, data = self.case()
        leaves = [p for p in _leaves(data) if isinstance(_get(data, p), (int, float))
                  and not isinstance(_get(data, p), bool)]
        for path in self.rng.sample(leaves, min(len(leaves), self.rng.randint(1, 2))):
            v = _get(data, path)
            factor = self.rng.choice([0.5, 0.9, 1.1, 2.0, 1e-3, 1e3, 1e-12, 1e12])
            _set(data, path, type(v)(v * factor) if isinstance(v, float) else max(1, int(v * factor)))
        if name in LBM:     # keep the grids small, so that valid inputs can be run
            data["lattice"]["resolution"] = min(data["lattice"]["resolution"], 24)
            data["time"] = {"steps": self.rng.randint(1, 200), "monitor_interval": 50}
        return "scaled", name, data, []

    def fem_fields(self):
        """class 6: NaN/Inf and extreme values in FEM case fields (set where a case has the field)."""
        name, data = self.case(FEM)
        target = self.rng.choice(["dirichlet", "source", "conductivity", "body_force", "mesh", "probe", "neumann",
                                  "rtol", "young"])
        v = self.rng.choice([math.nan, math.inf, -math.inf, 1e308, 1e-308, 1e200, -1e200, 1e150, 1e30])
        p = data.setdefault("problem", {})
        if target == "dirichlet":
            bc = data["boundary"]["dirichlet"][0]
            if "value" in bc:
                bc["value"] = v
            else:
                bc["displacement"] = [v, 0.0]
        elif target in ("source", "conductivity", "young"):
            p[target] = v
        elif target == "body_force":
            p["body_force"] = [v, 1.0]
        elif target == "mesh":
            data["mesh"]["x"] = [0.0, v]
        elif target == "probe":
            data.setdefault("output", {})["probe"] = [v, v]
        elif target == "neumann":
            data["boundary"]["neumann"] = [{"where": {"all": True}, "flux": v}]
        else:
            data.setdefault("solve", {})["rtol"] = v
        return "fem_fields", name, data, []

    def inputs(self, n: int):
        makers = [self.numbers] * 6 + [self.scaled] * 3 + [self.structure] * 2 + [self.overrides] * 3 + \
                 [self.file] * 3 + [self.no_fluid] * 2 + [self.fem_fields] * 2
        for _ in range(n):
            yield self.rng.choice(makers)()


# ------------------------------------------------------------------------------------------------
# the solver-options generator: (class, case name, data, precision), to be run.
# Every table is {field: (allowed values, the documented edges among them; values outside the allowed ones)}
# (docs/guide/case_reference.md); a drawn input sets a random subset of the fields to allowed values, and one input in
# five one field to a value outside them.

FEM_SOLVE = {
    "method": (["cg", "pcg-jacobi", "spsolve", "ir-restarted", "cg-reliable", "CG"], ["gmres", "", 3]),
    "rtol": ([1e-16, 1e-13, 1e-10, 1e-6, 1e-3, 0.5, 0.999999], [0.0, 1.0, 9e-17, -1e-8, 2.0]),
    "maxiter": ([1, 2, 64, 1000, 10**9, 10**9], [0, -1, 10**9 + 1, 2.5]),
    "check_every": ([1, 2, 7, 64, 10_000], [0, 10_001]),
    "true_every": ([0, 1, 5, 10**9], [-1]),
    "inner_rtol": ([1e-12, 1e-3, 0.5, 0.999], [0.0, 1.0]),
    "max_outer": ([1, 2, 5, 1000], [0]),
    "stagnation": ([1e-9, 0.1, 0.999], [0.0, 1.0]),
    "reliable_delta": ([1e-9, 0.01, 0.5, 0.999], [0.0, 1.5]),
    "reliable_patience": ([1, 2, 10, 10**9], [0]),
    "reference": (["auto", "always", "never"], ["sometimes"]),
    "reference_max_dofs": ([0, 1, 50, 300_000], [-1]),
}
PRECONDITIONERS = (["mg", "amg", "amg", "mg", "auto", "none", "jacobi"], ["ilu", "MG", ""])
MULTIGRID = {
    "hierarchy": (["fp64", "fp32", "fp16"], ["fp8", "bf16"]),
    "smoother": (["chebyshev", "jacobi"], ["gauss_seidel"]),
    "degree": ([1, 2, 3, 10], [0, 11]),
    # small levels mostly: the grids here have at most a few hundred unknowns
    "coarse_size": ([1, 2, 4, 4, 10, 10, 60, 400, 5000], [0, 5001]),
    "max_levels": ([2, 3, 4, 30, 60], [1, 61]),
    "amg": (["sa", "rs"], ["sa2"]),
    "strength": ([0.0, 1e-3, 0.1, 0.25, 0.26, 0.5, 0.9, 0.99, 1.0], [-0.01, 1.01, 2.0]),
    "flexible": ([True, False], ["yes", 1]),
    "level_format": (["auto", "dia", "csr"], ["ell"]),
}
FEM_PRECISIONS = (["fp64", "fp64", "fp32", "mixed"], ["fp16s", "fp16c"])
FEM_METHODS = {"fp64": ["cg", "spsolve", "CG"], "fp32": ["cg"],     # the methods that fit each precision and any
               "mixed": ["ir-restarted", "cg-reliable"]}          # preconditioner (pcg-jacobi: jacobi only)
FEM_NX = [2, 3, 4, 5, 8, 12, 16]                # mesh.nx (odd: geometric levels end in aggregation)
# Dirichlet selections from the whole boundary down to one corner node (a nearly singular system) or nothing, and
# Neumann fluxes on the rest: Poisson systems from well conditioned to singular
DIRICHLET_WHERE = [{"all": True}, {"x": 0.0}, {"x": 0.0}, {"x": 0.0, "y_max": 0.25}, {"x": 0.0, "y_max": 0.25},
                   {"y": 0.0, "x_max": 0.1}, {"x": 0.0, "y": 0.0}, {"tag": "left"}, {"tag": "nope"}]
NEUMANN = [[], [{"where": {"all": True}, "flux": 1.0}], [{"where": {"y": 1.0}, "flux": -1e3}],
           [{"where": {"x": 1.0}, "flux": 0.0}]]

SIDES = ("left", "right", "bottom", "top")
SIDE = (["periodic", "wall", "moving_wall", "inlet", "outlet"], ["slip", "Wall", ""])
LAYERS = ([{"width": 1e-3}, {"width": 0.05, "ramp": 0.05}, {"width": 0.3, "viscosity_ratio": 1.0},
           {"width": 1.0, "ramp": 1e-3, "viscosity_ratio": 10_000.0}],
          [{"width": 0.0}, {"width": -1.0}, {"width": 0.1, "ramp": 0.2}, {"width": 1e9},
           {"width": 0.1, "viscosity_ratio": 0.5}, {"width": 0.1, "viscosity_ratio": 10_001.0}, {}, {"depth": 1}])
LBM_BOUNDARIES = {
    "moving_wall_velocity": ([-10.0, -1.0, 0.0, 0.5, 1.0, 10.0], [-10.01, 11.0]),
    "inlet_profile": (["parabolic", "uniform"], ["plug"]),
    "outlet": (["pressure", "characteristic"], ["convective"]),
    "ramp_time": ([0.0, 1e-9, 0.01, 0.5, 8.0, 1e6], [-1.0]),
    "absorbing_layer": LAYERS,
}
LBM_TIME = {
    "monitor_interval": ([1, 3, 10, 64, 10**9], [0]),
    "output_interval": ([0.0, 0.01, 0.1, 1.0], [-1.0]),
    "checkpoint_interval": ([0, 1, 7, 50], [-1]),
}
LBM_STEPS = ([1, 2, 3, 10, 25, 40, 60, 100], [0, -5, 2.0])      # always set: the runs stay short
LBM_STEADY = {"enabled": ([True, False], ["yes"]), "tolerance": ([1e-12, 1e-3, 0.5, 0.999], [0.0, 1.0]),
              "interval": ([1, 5, 50, 10**9], [0])}
LBM_LATTICE = {"collision": (["bgk", "trt"], ["mrt"]), "magic": ([1e-3, 0.1875, 0.25, 10.0], [0.0, 10.5]),
               "bounce_back": (["simple", "bouzidi"], ["halfway"]),
               "streaming": (["auto", "two-buffer", "in-place"], ["aa"])}
LBM_INITIAL = {"condition": (["rest", "taylor_green", "inflow"], ["vortex"])}
LBM_PRECISIONS = (["fp64", "fp32", "fp16s", "fp16c"], ["mixed"])
# lattice.resolution that keeps each case's grid small (the cylinder's channel needs a multiple of 10 cells
# across its diameter to be whole: 220 x 41 cells)
LBM_RESOLUTION = {"lid_driven_cavity": [4, 8, 12, 16], "taylor_green": [8, 16], "poiseuille": [4, 6, 8],
                  "cylinder_2d1": [10]}
OUTLET_CASES = ("poiseuille", "cylinder_2d1")      # an inlet on the left, an outlet on the right


class SolverOptions:
    """Solver, boundary and time options on small grids (FEM mesh.nx <= 16 or the plate mesh unrefined, 721
    unknowns at most; LBM 20 x 20 cells or the 220 x 41 cylinder channel, at most 100 steps)."""

    def __init__(self, seed, base: dict):
        self.rng = random.Random(seed)
        self.base = base

    def _some(self, table: dict, share: float) -> dict:
        """A random subset (each field with probability ``share``) of the table's fields, at allowed values."""
        return {k: self.rng.choice(good) for k, (good, _) in table.items() if self.rng.random() < share}

    def _one(self, choices, bad_share: float = 0.1):
        good, bad = choices
        return self.rng.choice(bad if self.rng.random() < bad_share else good)

    def _spoil(self, *sections) -> None:
        """One in five inputs: one field of one (section, table) set outside its allowed values."""
        if self.rng.random() < 0.2:
            section, table = self.rng.choice(sections)
            key = self.rng.choice(list(table))
            section[key] = copy.deepcopy(self.rng.choice(table[key][1]))

    def _case(self, name: str) -> dict:
        return copy.deepcopy(self.base[name])

    def fem_solve(self, boundary: bool = False):
        """[solve] and [solve.multigrid] of the FEM cases (their own boundary conditions)."""
        name = self.rng.choice(FEM)
        data = self._case(name)
        mesh = data.setdefault("mesh", {})
        if mesh.get("kind") == "file":
            mesh["refine"] = 0
        else:
            mesh["nx"] = self.rng.choice(FEM_NX)
        precision = self._one(FEM_PRECISIONS, 0.05)
        solve = data.setdefault("solve", {})
        solve.update(self._some(FEM_SOLVE, 0.3))
        if "method" in solve and precision in FEM_METHODS and self.rng.random() < 0.85:
            solve["method"] = self.rng.choice(FEM_METHODS[precision])      # mostly one that fits the precision
        solve["preconditioner"] = self._one(PRECONDITIONERS, 0.05)
        if mesh.get("kind") == "file" and solve["preconditioner"] == "mg" and self.rng.random() < 0.8:
            solve["preconditioner"] = "amg"                                 # mostly one that fits the mesh
        solve["multigrid"] = self._some(MULTIGRID, 0.5)
        self._spoil((solve, FEM_SOLVE), (solve["multigrid"], MULTIGRID))
        return "fem_solve", name, data, precision

    def fem_boundary(self):
        """fem_solve on a Poisson problem fixed on less and less of its boundary (down to one node, or none)."""
        _, name, data, precision = self.fem_solve()
        if data["problem"]["kind"] != "poisson":
            name, data = "poisson_manufactured", self._case("poisson_manufactured")
            data["mesh"]["nx"] = self.rng.choice(FEM_NX)
            data["solve"] = {"preconditioner": self._one(PRECONDITIONERS, 0.0), "multigrid": self._some(MULTIGRID, 0.5)}
        problem = data["problem"]
        problem.pop("manufactured", None)               # the manufactured solution needs u = 0 all round
        problem["source"] = self.rng.choice([0.0, 1.0, -50.0])
        data.pop("output", None)                        # the probes of the shipped cases may lie off these meshes
        data["boundary"] = {"dirichlet": [{"where": self.rng.choice(DIRICHLET_WHERE), "value": 1.0}],
                            "neumann": copy.deepcopy(self.rng.choice(NEUMANN))}
        return "fem_boundary", name, data, precision

    def _lbm_case(self):
        name = self.rng.choice(["lid_driven_cavity", "lid_driven_cavity", "taylor_green", "poiseuille",
                                "poiseuille", "cylinder_2d1"])
        data = self._case(name)
        data["lattice"]["resolution"] = self.rng.choice(LBM_RESOLUTION[name])
        data["time"]["steps"] = self._one(LBM_STEPS, 0.05)
        return name, data

    def lbm_boundaries(self):
        """[boundaries]: sides, moving-wall speed, inlet profile, outlet rule, smooth start, absorbing layer."""
        name, data = self._lbm_case()
        b = data.setdefault("boundaries", {})
        for side in SIDES:
            if self.rng.random() < 0.08:
                b[side] = self._one(SIDE, 0.05)
        options = self._some(LBM_BOUNDARIES, 0.35)
        if name not in OUTLET_CASES and self.rng.random() < 0.8:
            # the outlet's options (a characteristic rule, a layer along it) mostly where the case has an outlet
            options = {k: v for k, v in options.items() if k not in ("outlet", "absorbing_layer")}
        b.update(copy.deepcopy(options))
        if self.rng.random() < 0.7:     # a reference pins the sides: mostly none, so that changed sides still run
            data.setdefault("validation", {})["reference"] = "none"
        self._spoil((b, LBM_BOUNDARIES))
        return "lbm_boundaries", name, data, self._one(LBM_PRECISIONS, 0.05)

    def lbm_time(self):
        """[time], [steady], [lattice] and [initial] options."""
        name, data = self._lbm_case()
        data["time"].update(self._some(LBM_TIME, 0.4))
        if data["time"].get("checkpoint_interval") == 1 and isinstance(data["time"]["steps"], int):
            data["time"]["steps"] = min(data["time"]["steps"], 10)     # a checkpoint (a disk write) every step
        steady = data.setdefault("steady", {})
        steady.update(self._some(LBM_STEADY, 0.4))
        data["lattice"].update(self._some(LBM_LATTICE, 0.25))
        initial = data.setdefault("initial", {})
        initial.update(self._some(LBM_INITIAL, 0.15))
        self._spoil((data["time"], LBM_TIME), (steady, LBM_STEADY), (data["lattice"], LBM_LATTICE),
                    (initial, LBM_INITIAL))
        return "lbm_time", name, data, self._one(LBM_PRECISIONS, 0.05)

    def inputs(self, n: int):
        makers = [self.fem_solve] * 4 + [self.fem_boundary] + [self.lbm_boundaries] * 2 + [self.lbm_time] * 3
        for _ in range(n):
            yield self.rng.choice(makers)()


# ------------------------------------------------------------------------------------------------

class Hang(BaseException):   # not an Exception: no `except Exception` in the code under test swallows it
    pass


@contextlib.contextmanager
def outer_limit(seconds: float = CHUNK_LIMIT_S):
    """Raise Hang in whatever runs when ``seconds`` have passed: the limit of a whole chunk, far above its run time,
    so that only a real hang reaches it (the input running then is the one that hangs)."""
    def alarm(signum, frame):
        raise Hang()

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:     # argparse's own errors: usage, then one error line, exit 2
            code = exc.code
    return code, out.getvalue(), err.getvalue()


FAILED = ("blew_up", "not_converged")       # the statuses `hpcsolve run` exits 3 with
#: the statuses `hpcsolve run` exits 0 with (issue 50: an FEM solve that missed rtol with a solution error negligible
#: against the discretisation error ends accurate_to_discretisation, hpcsolve.fem.judge)
EXIT_0 = ("completed", "converged", "not_steady", "accurate_to_discretisation")


def _run_api(path: Path, precision: str):
    """`hpcsolve run PATH --backend numpy --precision P` without its result folder (a third of the time): the
    command's own run_case, under the command's own mapping of errors to an exit code and one message
    (cli._execute), exit 3 for a run that failed (as cli._report). (exit code, stderr text, Result or None)."""
    got = {}

    def run(_args):
        got["result"] = result = run_case(str(path), "numpy", precision, progress=False, plots=False)
        return 3 if result.status in FAILED else 0

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        code, message = cli._execute(run, argparse.Namespace(command="run", dry_run=False))
    return code, (message or "") + err.getvalue(), got.get("result")


def _finite_numbers(info: dict) -> bool:
    return all(math.isfinite(v) for v in info.values() if isinstance(v, float))


def _small(info: dict) -> bool:
    """A run (or a dry run's probe) of a few tenths of a second: a small grid, few steps."""
    steps = info.get("steps", 0) or 0
    cells = (info.get("nx") or 0) * (info.get("ny") or 0)
    return (info["solver"] == "lbm" and cells <= 10_000 and steps <= 2_000 and steps * cells <= 3e5) or \
           (info["solver"] == "fem" and (info.get("unknowns") or 10**9) <= 5_000)


def _one_error_naming_a_field(err: str) -> str | None:
    """What is wrong with the stderr of an exit 2 (None: one `hpcsolve: error:` message naming a field, not too
    long; warnings may come first, and a case with several problems lists them on the lines after)."""
    text = "\n".join(line for line in err.strip().splitlines() if not line.startswith("hpcsolve: warning:"))
    if not text.startswith("hpcsolve: error:") or "Traceback" in text or not names_a_field(text):
        return "exit 2 without one error message naming a field"
    if len(text) > 5000:
        return f"message of {len(text)} characters"
    return None


def _describe(exc: BaseException) -> str:
    """An escaped exception as its type, message and the innermost frames (where to look)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"{type(exc).__name__}: {str(exc)[:300]} [{where}]"


def _write_case(tmp_path: Path, i: int, data) -> Path:
    path = tmp_path / "case" / f"{i:05d}" / "case.toml"
    path.parent.mkdir(parents=True)
    (path.parent / "meshes").symlink_to(CASES / "meshes")
    path.write_text(data if isinstance(data, str) else to_toml(data))
    return path


def _report(family: str, chunk: int, counts: Counter, outcomes: Counter) -> None:
    print(f"\n{family} chunk {chunk} (seed {SEED}): {sum(counts.values())} inputs {dict(sorted(counts.items()))}; "
          f"outcomes {dict(sorted(outcomes.items()))}")


def _chunks(count: int, default: int):
    """Chunk numbers: the first ``default`` in the default suite, the rest a soak (-m slow)."""
    return [pytest.param(k, marks=() if k < default else pytest.mark.slow, id=f"chunk{k}") for k in range(count)]


# ------------------------------------------------------------------------------------------------ bad input

@pytest.mark.parametrize("chunk", _chunks(BAD_CHUNKS, DEFAULT_BAD_CHUNKS))
@pytest.mark.filterwarnings("error::RuntimeWarning")   # an overflow that reaches NumPy is a missed range check
def test_generated_inputs_give_a_result_or_an_error_naming_the_field(chunk, tmp_path):
    with contextlib.redirect_stderr(io.StringIO()):   # meshio warns about the tags the test meshes lack
        files = make_files(tmp_path / "files")
    gen = Generator(f"{SEED}:bad:{chunk}", files)
    counts, outcomes, failures, runs, dry_runs = Counter(), Counter(), [], 0, 0
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    i, kind = -1, ""
    try:
        with outer_limit():
            for i, (kind, name, data, sets) in enumerate(gen.inputs(BAD_CHUNK)):
                counts[kind] += 1
                path = _write_case(tmp_path, i, data)
                try:
                    code, out, err = _cli(["validate", str(path), "--json", "--backend", "numpy", *sets])
                    info = json.loads(out) if code == 0 else {}
                    # the dry run's probe (a short timed run, or the whole solve of a small FEM system) is bounded by
                    # the grid: only small inputs are dry-run
                    if code == 0 and dry_runs < DRY_RUNS and _small(info):
                        dry_runs += 1
                        dcode, _, derr = _cli(["run", str(path), "--dry-run", "--backend", "numpy", *sets])
                        outcomes[f"dry-run exit {dcode}"] += 1
                        if dcode not in (0, 2) or (dcode == 2 and _one_error_naming_a_field(derr)):
                            failures.append((kind, i, f"dry-run exit {dcode}", derr[-500:]))
                    if code == 0 and runs < RUNS and _small(info):
                        runs += 1
                        outdir = tmp_path / "runs" / f"{i:05d}"
                        rcode, _, rerr = _cli(["run", str(path), "--backend", "numpy", "--quiet", "--no-plots",
                                               "--out", str(outdir), *sets])
                        outcomes[f"run exit {rcode}"] += 1
                        if rcode == 0:
                            summary = read_result_folder(outdir)
                            assert summary["status"] in EXIT_0, summary["status"]
                            assert summary["case"] == info["case"]
                        elif rcode == 2:            # validate passed it: a check validate misses
                            failures.append((kind, i, "validate passed, run refused", rerr[-500:]))
                        elif rcode == 3:            # a blow-up or a solve that did not converge, said plainly
                            assert re.search(r"^hpcsolve: error: .*(not converged|blew up|step \d+)", rerr, re.M), rerr
                        else:
                            failures.append((kind, i, f"run exit {rcode}", rerr[-500:]))
                except Hang:
                    raise
                except BaseException as exc:   # noqa: BLE001 - any escape from cli.main is a failure
                    failures.append((kind, i, _describe(exc), str(sets)[:200]))
                    continue
                outcomes[f"exit {code}"] += 1
                if code == 0:
                    if not _finite_numbers(info):
                        failures.append((kind, i, "exit 0 with non-finite derived values", out[:300]))
                elif code == 2:
                    wrong = _one_error_naming_a_field(err)
                    if wrong:
                        failures.append((kind, i, wrong, err[:300]))
                else:
                    failures.append((kind, i, f"exit {code}", err[-500:]))
    except Hang:
        failures.append((kind, i, f"hang: the chunk's outer limit of {CHUNK_LIMIT_S} s passed in this input", ""))
    _report("bad input", chunk, counts, outcomes)
    assert not failures, f"{len(failures)} failures, first: {failures[:5]}"
    assert sum(counts.values()) == BAD_CHUNK and len(counts) == 8, counts
    assert runs >= RUNS // 2, f"only {runs} valid small inputs were run"


# ------------------------------------------------------------------------------------------------ solver options

def _check_result(result, data: dict) -> str | None:
    """What is wrong with the Result of a run that exited 0 (None: nothing): its status, finite fields, and the work
    it did against what it was given (steps of an LBM run, iterations of a FEM solve)."""
    if result.status not in EXIT_0:
        return f"exit 0 with status {result.status!r}"
    if result.status == "accurate_to_discretisation" and result.metrics.get("precision_negligible") is not True:
        return f"{result.status} without a negligible precision error: {result.metrics.get('precision_error_ratio')}"
    bad = [k for k, v in result.fields.items() if not np.all(np.isfinite(np.asarray(v, dtype=np.float64)))]
    if bad:
        return f"{result.status} with non-finite fields {bad}"
    m = result.metrics
    if result.solver == "lbm":
        planned = result.derived["steps"]
        if not 1 <= m["steps"] <= planned or (result.status == "completed" and m["steps"] != planned):
            return f"{result.status} after {m['steps']} steps of {planned}"
    else:
        given = data.get("solve", {}).get("maxiter") or max(10 * result.derived["unknowns"], 100)  # solve()'s default
        if m.get("iterations", 0) > given:
            return f"{result.status} after {m['iterations']} iterations, maxiter {given}"
        if result.status == "converged" and not m["true_residual"] <= data.get("solve", {}).get("rtol", 1e-10):
            return f"converged with true residual {m['true_residual']}"
    return None


def _failure_unsaid(result, err: str) -> str | None:
    """What is wrong with an exit 3 (None: nothing): a run that returned a failed Result says its status and why
    (run_case), or the command's error line does (the result folder's run, or a solver error raised)."""
    if result is not None:
        return None if result.status in FAILED and result.message.strip() else \
            f"exit 3 with status {result.status!r}, message {result.message!r}"
    lines = [line for line in err.strip().splitlines() if line.startswith("hpcsolve: error:")]
    return None if len(lines) == 1 and "Traceback" not in err else "exit 3 without one error line"


@pytest.mark.parametrize("chunk", _chunks(SOLVER_CHUNKS, DEFAULT_SOLVER_CHUNKS))
def test_generated_solver_options_run_to_a_result_or_an_error_naming_the_field(chunk, tmp_path):
    base = {n: tomllib.loads((CASES / f"{n}.toml").read_text()) for n in LBM + FEM}
    gen = SolverOptions(f"{SEED}:solver:{chunk}", base)
    counts, outcomes, failures = Counter(), Counter(), []
    i, kind, precision = -1, "", ""
    try:
        with outer_limit():
            for i, (kind, name, data, precision) in enumerate(gen.inputs(SOLVER_CHUNK)):
                counts[kind] += 1
                path = _write_case(tmp_path, i, data)
                checkpoints = data.get("time", {}).get("checkpoint_interval", 0)
                # every CLI_EVERY-th input (and those writing checkpoints) through the command with its result folder
                via_cli = i % CLI_EVERY == 0 or (isinstance(checkpoints, int) and checkpoints > 0)
                try:
                    if via_cli:
                        outdir = tmp_path / "runs" / f"{i:05d}"
                        code, _, err = _cli(["run", str(path), "--backend", "numpy", "--precision", precision,
                                             "--quiet", "--no-plots", "--out", str(outdir)])
                        result = None
                    else:
                        code, err, result = _run_api(path, precision)
                except Hang:
                    raise
                except BaseException as exc:   # noqa: BLE001 - any escape from the command is a failure
                    failures.append((kind, i, _describe(exc), f"{name} --precision {precision}: {to_toml(data)[:600]}"))
                    continue
                outcomes[f"{kind} exit {code}"] += 1
                wrong = None
                if code == 0 and result is not None:
                    wrong = _check_result(result, data)
                elif code == 0:
                    summary = read_result_folder(outdir)
                    if summary["status"] not in EXIT_0:
                        wrong = f"exit 0 with status {summary['status']!r}"
                elif code == 2:
                    wrong = _one_error_naming_a_field(err)
                elif code == 3:                 # a blow-up or a solve that did not converge, said plainly
                    wrong = _failure_unsaid(result, err)
                else:
                    wrong = f"exit {code}"
                if wrong:
                    failures.append((kind, i, wrong, f"{err[-400:]} | {name} --precision {precision}: "
                                                     f"{to_toml(data)[:600]}"))
    except Hang:
        failures.append((kind, i, f"hang: the chunk's outer limit of {CHUNK_LIMIT_S} s passed in this input",
                         precision))
    _report("solver options", chunk, counts, outcomes)
    assert not failures, f"{len(failures)} failures, first: {failures[:3]}"
    assert sum(counts.values()) == SOLVER_CHUNK and len(counts) == 4, counts
    # not a pass by refusing everything: a quarter of each family's inputs at least ran to a result (about half do)
    for family in ("fem", "lbm"):
        ran = sum(n for k, n in outcomes.items() if k.startswith(family) and k.endswith("exit 0"))
        tried = sum(n for k, n in counts.items() if k.startswith(family))
        assert ran >= tried // 4, f"{family}: only {ran} of {tried} inputs ran to a result ({dict(outcomes)})"


@pytest.mark.parametrize("precision,sets,field", [
    # found by the solver-options inputs: these named the solver's argument ('method', 'preconditioner'), not the
    # case's field, the last with "got <hpcsolve.fem.linalg.precond.multigrid.Multigrid object at 0x...>" as its value
    ("fp32", ["solve.method='spsolve'"], "solve.method"),
    ("fp64", ["solve.method='cg-reliable'"], "solve.method"),
    ("mixed", ["solve.method='cg'"], "solve.method"),
    ("fp64", ["solve.method='pcg-jacobi'", "solve.preconditioner='amg'"], "solve.preconditioner"),
    ("fp32", ["solve.method='pcg-jacobi'", "solve.preconditioner='mg'"], "solve.preconditioner")])
def test_a_solve_method_that_does_not_fit_is_refused_by_validate_naming_the_case_field(precision, sets, field):
    code, _, err = _cli(["validate", str(CASES / "poisson_manufactured.toml"), "--backend", "numpy",
                         "--precision", precision, *[a for s in sets for a in ("--set", s)]])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"hpcsolve: error: {field}: ") and "object at 0x" not in err, err


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_taylor_green_vortex_decayed_to_zero_has_no_relative_error(tmp_path):
    """Found by the bad-input soak (a 'scaled' physics.reynolds): at Re 1e-10 the analytic vortex is 0 in float64
    after a few steps, and its relative error divided by zero (a NumPy RuntimeWarning, an inf metric)."""
    out = tmp_path / "tg"
    code, _, err = _cli(["run", str(CASES / "taylor_green.toml"), "--backend", "numpy", "--quiet", "--no-plots",
                         "--out", str(out), "--set", "physics.reynolds=1e-10", "--set", "lattice.resolution=8",
                         "--set", "time.steps=10"])
    assert code == 0, err
    metrics = json.loads((out / "summary.json").read_text())["metrics"]
    assert metrics["velocity_rel_l2_error"] == "nan"             # summary.json writes non-finite numbers as text
    assert 0 < metrics["velocity_max_abs_error"] < 2          # the absolute error still says how far it is


def test_the_default_suite_runs_at_least_2000_inputs_with_solver_options():
    """Issue 36: at least 2,000 generated inputs with solver options per CI run (the default chunks)."""
    assert DEFAULT_SOLVER_CHUNKS * SOLVER_CHUNK >= 2000
    assert BAD_CHUNKS * BAD_CHUNK >= 10_000 and SOLVER_CHUNKS * SOLVER_CHUNK >= 10_000   # the soak (-m slow)


def test_paths_of_every_kind_as_case_out_and_resume_give_one_error(tmp_path):
    """The command line's own paths (the case file, --out, --resume) of every kind the file tests use."""
    with contextlib.redirect_stderr(io.StringIO()):
        files = make_files(tmp_path / "files")
    cavity = str(CASES / "lid_driven_cavity.toml")
    paths = sorted(set(files["mesh"] + files["mask"]))
    failures = []
    argv = []
    try:
        with outer_limit():
            for p in paths:
                for argv in (["validate", p], ["run", cavity, "--out", p, "--set", "time.steps=2", "--no-plots"],
                             ["run", "--resume", p]):
                    try:
                        code, _, err = _cli(argv)
                    except Hang:
                        raise
                    except BaseException as exc:   # noqa: BLE001 - any escape from cli.main is a failure
                        failures.append((argv, _describe(exc)))
                        continue
                    if argv[1] == cavity and code == 0:     # a new folder at a path that can be one
                        continue
                    last = err.strip().splitlines()[-1] if err.strip() else ""
                    if code != 2 or not last.startswith("hpcsolve: error:") or "Traceback" in err or \
                            not names_a_field(last):
                        failures.append((argv, code, err[:300]))
    except Hang:
        failures.append((argv, f"hang: the outer limit of {CHUNK_LIMIT_S} s passed"))
    assert not failures, failures[:5]
