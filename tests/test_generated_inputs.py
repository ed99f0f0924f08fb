"""Generated bad input: at least 2,000 inputs per run across the classes of issue 13 (non-finite and
extreme numbers, wrong types, deep nesting and long dotted keys, --set values, long values, mesh and
mask files of every kind, geometries without fluid, FEM fields), each validated in-process through
the command line. Every input must give exit 0 with finite derived parameters, or exit 2 with one
message naming a case field; never a traceback, never a hang. A sample of the valid small inputs is
also run, and its result folder checked.

The generator is seeded (HPCSOLVE_FUZZ_SEED, default 13) so a failure reproduces; the counts per
class are printed (pytest -s)."""

from __future__ import annotations

import contextlib
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
from hpcsolve.results import read_result_folder
from tomlgen import to_toml

ROOT = Path(__file__).parent.parent
CASES = ROOT / "cases"
LBM = ["lid_driven_cavity", "cylinder_2d1", "poiseuille", "taylor_green"]
FEM = ["poisson_manufactured", "cook_membrane", "heat_plate_with_hole"]
SEED = int(os.environ.get("HPCSOLVE_FUZZ_SEED", "13"))
INPUTS = int(os.environ.get("HPCSOLVE_FUZZ_INPUTS", "2200"))
RUNS = 24                    # valid small inputs that are also run
DRY_RUNS = 40                # valid inputs that are also dry-run (derived values, memory, run-time probe)
INPUT_SECONDS = 30           # one input longer than this is a hang

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
                                                               "lattice", "mesh", "time", "boundaries"}


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

class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def _cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:     # argparse's own errors: usage, then one error line, exit 2
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def _finite_numbers(info: dict) -> bool:
    return all(math.isfinite(v) for v in info.values() if isinstance(v, float))


def _small(info: dict) -> bool:
    steps = info.get("steps", 0) or 0
    cells = (info.get("nx") or 0) * (info.get("ny") or 0)
    return (info["solver"] == "lbm" and cells <= 20_000 and steps * cells <= 3e6) or \
           (info["solver"] == "fem" and (info.get("unknowns") or 10**9) <= 5_000)


@pytest.mark.slow
@pytest.mark.filterwarnings("error::RuntimeWarning")   # an overflow that reaches NumPy is a missed range check
def test_generated_inputs_give_a_result_or_an_error_naming_the_field(tmp_path):
    with contextlib.redirect_stderr(io.StringIO()):   # meshio warns about the tags the test meshes lack
        files = make_files(tmp_path / "files")
    gen = Generator(SEED, files)
    counts, outcomes, failures, runs, dry_runs = Counter(), Counter(), [], 0, 0
    previous = signal.signal(signal.SIGALRM, _alarm)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    try:
        for i, (kind, name, data, sets) in enumerate(gen.inputs(INPUTS)):
            counts[kind] += 1
            path = tmp_path / "case" / f"{i:05d}" / "case.toml"
            path.parent.mkdir(parents=True)
            (path.parent / "meshes").symlink_to(CASES / "meshes")
            path.write_text(data if isinstance(data, str) else to_toml(data))
            signal.setitimer(signal.ITIMER_REAL, INPUT_SECONDS)
            try:
                code, out, err = _cli(["validate", str(path), "--json", "--backend", "numpy", *sets])
                if code == 0 and dry_runs < DRY_RUNS:
                    dry_runs += 1
                    dcode, _, derr = _cli(["run", str(path), "--dry-run", "--backend", "numpy", *sets])
                    outcomes[f"dry-run exit {dcode}"] += 1
                    if dcode not in (0, 2) or (dcode == 2 and not names_a_field(derr)):
                        failures.append((kind, i, f"dry-run exit {dcode}", derr[-500:]))
                if code == 0 and runs < RUNS and _small(json.loads(out)):
                    runs += 1
                    outdir = tmp_path / "runs" / f"{i:05d}"
                    rcode, _, rerr = _cli(["run", str(path), "--backend", "numpy", "--quiet", "--no-plots",
                                           "--out", str(outdir), *sets])
                    outcomes[f"run exit {rcode}"] += 1
                    if os.environ.get("HPCSOLVE_FUZZ_VERBOSE"):
                        print(f"run {i} {kind}: exit {rcode} {rerr.strip()[:300]}")
                    if rcode == 0:
                        summary = read_result_folder(outdir)
                        assert summary["status"] in ("completed", "converged", "not_steady"), summary["status"]
                        assert summary["case"] == json.loads(out)["case"]
                    elif rcode == 2:            # validate passed it: a check validate misses
                        failures.append((kind, i, "validate passed, run refused", rerr[-500:]))
                    elif rcode == 3:            # a blow-up or a solve that did not converge, said plainly
                        assert re.search(r"^hpcsolve: error: .*(not converged|blew up|step \d+)", rerr, re.M), rerr
                    else:
                        failures.append((kind, i, f"run exit {rcode}", rerr[-500:]))
            except Hang:
                failures.append((kind, i, "hang", str(sets)[:200]))
                continue
            except BaseException as exc:   # noqa: BLE001 - any escape from cli.main is a failure
                failures.append((kind, i, f"{type(exc).__name__}: {str(exc)[:300]}", str(sets)[:200]))
                continue
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            outcomes[f"exit {code}"] += 1
            if code == 0:
                info = json.loads(out)
                if not _finite_numbers(info):
                    failures.append((kind, i, "exit 0 with non-finite derived values", out[:300]))
            elif code == 2:
                lines = err.strip().splitlines()
                if not lines or not lines[0].startswith("hpcsolve: error:") or not names_a_field(err):
                    failures.append((kind, i, "exit 2 without a named field", err[:300]))
                if len(err) > 5000:
                    failures.append((kind, i, f"message of {len(err)} characters", err[:200]))
            else:
                failures.append((kind, i, f"exit {code}", err[-500:]))
    finally:
        signal.signal(signal.SIGALRM, previous)
    print(f"\ngenerated inputs (seed {SEED}): {sum(counts.values())} {dict(counts)}; outcomes {dict(outcomes)}")
    assert sum(counts.values()) >= 2000 and len(counts) == 8
    assert runs >= RUNS // 2, f"only {runs} valid small inputs were run"
    assert not failures, f"{len(failures)} failures, first: {failures[:5]}"


def test_paths_of_every_kind_as_case_out_and_resume_give_one_error(tmp_path):
    """The command line's own paths (the case file, --out, --resume) of every kind the file tests use."""
    with contextlib.redirect_stderr(io.StringIO()):
        files = make_files(tmp_path / "files")
    cavity = str(CASES / "lid_driven_cavity.toml")
    paths = sorted(set(files["mesh"] + files["mask"]))
    failures = []
    previous = signal.signal(signal.SIGALRM, _alarm)
    try:
        for p in paths:
            for argv in (["validate", p], ["run", cavity, "--out", p, "--set", "time.steps=2", "--no-plots"],
                         ["run", "--resume", p]):
                signal.setitimer(signal.ITIMER_REAL, INPUT_SECONDS)
                try:
                    code, _, err = _cli(argv)
                except BaseException as exc:   # noqa: BLE001 - any escape from cli.main is a failure
                    failures.append((argv, f"{type(exc).__name__}: {str(exc)[:200]}"))
                    continue
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                if argv[1] == cavity and code == 0:     # a new folder at a path that can be one
                    continue
                last = err.strip().splitlines()[-1] if err.strip() else ""
                if code != 2 or not last.startswith("hpcsolve: error:") or "Traceback" in err or \
                        not names_a_field(last):
                    failures.append((argv, code, err[:300]))
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert not failures, failures[:5]
