"""Generated input for two classes of Reliability IV (issue 49), in seeded chunks (each a test of its own, a few
seconds long):

- huge integers: integer literals of 17 to 20,000 digits (decimal with or without underscores and a sign, hex,
  octal, binary; alone, in an array or nested arrays), in an integer, float, string, array or boolean field of a
  FEM or LBM case, through ``--set`` or in the case file (its key in a table, a dotted key, or the value on a line
  of its own inside a multi-line array), and as ``HPCSOLVE_CPU_THREADS``. Validated in-process: exit 2 with one
  error line naming the field (or the variable), never a traceback (beyond 4,300 digits tomllib raised a ValueError
  of its own, and a huge hex literal inside an array broke the error message).
- non-ASCII paths with an ASCII locale: the case file, ``--out`` and a mesh file under names with accents, Greek,
  CJK, right-to-left text, emoji and combining marks, with stdout and stderr ASCII streams (errors='strict', as
  PYTHONIOENCODING=ascii gives): ``validate``, ``run --out``, ``compare --dry-run`` and bad input naming such a path.
  The same exit code as the command gives with UTF-8 streams, everything written to the streams is ASCII (a
  non-ASCII character as a backslash escape), a run's result in the folder named; never UnicodeEncodeError.

The default suite runs the first DEFAULT_* chunks of each class, the soak (``-m slow``) the rest; seeded by
HPCSOLVE_FUZZ_SEED (default 13; one stream per chunk); the counts per kind are printed (pytest -s).
"""

from __future__ import annotations

import contextlib
import io
import random
import sys
from collections import Counter
from pathlib import Path

import pytest

from hpcsolve import cli
from test_generated_inputs import SEED, _chunks, _describe, _report, names_a_field, outer_limit

ROOT = Path(__file__).parent.parent
CASES = ROOT / "cases"
INT_CHUNK, INT_CHUNKS, DEFAULT_INT_CHUNKS = 60, 20, 2
PATH_CHUNK, PATH_CHUNKS, DEFAULT_PATH_CHUNKS = 8, 20, 2

FEM = 'solver = "fem"\nname = "g"\n'
LBM = 'solver = "lbm"\nname = "g"\n[physics]\nreynolds = 10.0\n[lattice]\nresolution = 8\n[time]\nsteps = 2\n'
# (family, table, key): integer, float, string, array, boolean and list fields
KEYS = [("fem", "mesh", "nx"), ("fem", "mesh", "x"), ("fem", "mesh", "refine"), ("fem", "problem", "source"),
        ("fem", "solve", "maxiter"), ("fem", "solve", "rtol"), ("fem", "output", "probe"), ("fem", "", "description"),
        ("fem", "output", "plots"), ("fem", "compare", "fields"), ("fem", "problem", "body_force"),
        ("lbm", "time", "checkpoint_interval"), ("lbm", "physics", "velocity"), ("lbm", "", "name"),
        ("lbm", "steady", "interval"), ("lbm", "domain", "length"), ("lbm", "run", "backend")]


def _huge_literal(rng: random.Random) -> tuple[str, str]:
    """(TOML integer literal beyond 2^53, its kind)."""
    digits = rng.choice([17, 20, 400, 4300, 4301, 5000, 20000, rng.randint(17, 20000)])
    kind = rng.choice(["dec", "dec", "underscore", "signed", "hex", "oct", "bin"])
    if kind == "hex":
        return "0x" + "".join(rng.choice("0123456789abcdefABCDEF") for _ in range(max(14, digits // 2))), kind
    if kind == "oct":
        return "0o" + "7" + "".join(rng.choice("01234567") for _ in range(max(18, digits // 2))), kind
    if kind == "bin":
        return "0b1" + "".join(rng.choice("01") for _ in range(max(54, digits // 4))), kind
    body = str(rng.randint(1, 9)) + "".join(rng.choice("0123456789") for _ in range(digits - 1))
    if kind == "underscore":
        body = "_".join(body[i:i + 3] for i in range(0, len(body), 3))
    return (rng.choice("+-") + body if kind == "signed" else body), kind


def _in_value(lit: str, rng: random.Random) -> tuple[str, str]:
    how = rng.choice(["alone", "alone", "array", "nested"])
    return {"alone": lit, "array": f"[0, {lit}]", "nested": f"[[{lit}]]"}[how], how


def _huge_input(rng: random.Random, tmp: Path, i: int):
    """(argv, environment, the name the message must hold, kind)."""
    lit, kind = _huge_literal(rng)
    if rng.random() < 0.1:
        return (["run", str(CASES / "poisson_manufactured.toml"), "--set", "mesh.nx=2", "--out", str(tmp / f"{i}-run"),
                 "--quiet"], {"HPCSOLVE_CPU_THREADS": lit.lstrip("+")}, "HPCSOLVE_CPU_THREADS", "env")
    family, table, key = rng.choice(KEYS)
    value, how = _in_value(lit, rng)
    field = f"{table}.{key}" if table else key
    where = rng.choice(["set", "file", "dotted", "multiline"])
    head = FEM if family == "fem" else LBM
    if where == "set":
        path = tmp / f"{i}.toml"
        path.write_text(head)
        return ["validate", str(path), "--set", f"{field}={value}"], {}, field, f"{kind}/{how}/set"
    if where == "multiline":
        value = "[\n  0,\n  " + lit + "\n]"
    if table and table in head:           # the LBM head has [physics], [lattice], [time]: a key of its table
        text = head.replace(f"[{table}]\n", f"[{table}]\n{key} = {value}\n")
    elif table and where == "dotted":
        text = f"{table}.{key} = {value}\n" + head
    elif table:
        text = head + f"[{table}]\n{key} = {value}\n"
    else:
        text = f"{key} = {value}\n" + (head.replace('name = "g"\n', "") if key == "name" else head)
    path = tmp / f"{i}.toml"
    path.write_text(text)
    return ["validate", str(path)], {}, field, f"{kind}/{how}/{where}"


@pytest.mark.parametrize("chunk", _chunks(INT_CHUNKS, DEFAULT_INT_CHUNKS))
def test_generated_huge_integers_are_one_error_naming_the_field(chunk, tmp_path, monkeypatch):
    rng = random.Random(f"{SEED}:r4-int:{chunk}")
    counts, outcomes, failures = Counter(), Counter(), []
    with outer_limit():
        for i in range(INT_CHUNK):
            argv, env, field, kind = _huge_input(rng, tmp_path, i)
            counts[kind.split("/")[0]] += 1
            with monkeypatch.context() as mp:
                for k, v in env.items():
                    mp.setenv(k, v)
                err = io.StringIO()
                try:
                    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                        code = cli.main(argv)
                except Exception as exc:  # noqa: BLE001 - what the test looks for
                    failures.append(f"{kind} {field}: {_describe(exc)}")
                    continue
            lines = [x for x in err.getvalue().strip().splitlines() if not x.startswith("hpcsolve: warning:")]
            outcomes[code] += 1
            ok = (code == 2 and len(lines) == 1 and lines[0].startswith("hpcsolve: error: ")
                  and (field in lines[0] if env else names_a_field(lines[0]) and field.split(".")[0] in lines[0]))
            if not ok:
                failures.append(f"{kind} {field}: exit {code}: {err.getvalue()[-300:]}")
    _report("huge integers", chunk, counts, outcomes)
    assert not failures, "\n".join(failures[:10])


# ------------------------------------------------------------------------------------ non-ASCII paths

NAMES = ["r\u00e9sultats", "\u03a9mega", "\u65e5\u672c\u8a9e", "\u05e9\u05dc\u05d5\u05dd", "\U0001f600 run",
         "e\u0301t\u00e9", "\u00fc ber", "na\u00efve-\u00c5", "\u0436\u0443\u043a"]
TINY = {"poisson_manufactured.toml": ["mesh.nx=4"], "cook_membrane.toml": ["mesh.nx=2"],
        "taylor_green.toml": ["lattice.resolution=8", "time.steps=2"]}


def _ascii_streams():
    out_raw, err_raw = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_raw, encoding="ascii", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_raw, encoding="ascii", errors="strict", write_through=True)
    return out, err, out_raw, err_raw


def _run_both(argv: list[str], monkeypatch) -> tuple[int, int, bytes, str]:
    """(exit code with ASCII streams, with UTF-8 ones, the ASCII streams' bytes, the UTF-8 stderr)."""
    out, err, out_raw, err_raw = _ascii_streams()
    with monkeypatch.context() as mp:
        mp.setattr(sys, "stdout", out)
        mp.setattr(sys, "stderr", err)
        code = cli.main(argv)
    u_err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(u_err):
        argv = [a.replace("ascii-run", "utf8-run") for a in argv]
        code_utf8 = cli.main(argv)
    return code, code_utf8, out_raw.getvalue() + err_raw.getvalue(), u_err.getvalue()


def _path_input(rng: random.Random, tmp: Path, i: int):
    name = rng.choice(NAMES) + rng.choice(["", "-2", " \u00e9"])
    folder = tmp / f"{i}-{name}"
    folder.mkdir()
    case_name = rng.choice(list(TINY))
    case = folder / f"{name}.toml"
    case.write_text((CASES / case_name).read_text())
    sets = [a for s in TINY[case_name] for a in ("--set", s)]
    kind = rng.choice(["validate", "run", "run", "dry-run", "bad-set", "missing", "mesh"])
    if kind == "validate":
        return ["validate", str(case), *sets], kind
    if kind == "run":
        return ["run", str(case), *sets, "--out", str(folder / f"ascii-run-{name}"), "--quiet", "--no-plots"], kind
    if kind == "dry-run":
        return ["compare", str(case), *sets, "--dry-run", "--precisions", "fp64"], kind
    if kind == "bad-set":
        return ["validate", str(case), "--set", f'name="{name}"'], kind
    if kind == "missing":
        return ["validate", str(folder / f"{name}-missing.toml")], kind
    mesh = folder / f"{name}.msh"
    mesh.write_text("$MeshFormat\n2.2 0 8\n$EndMeshFormat\n$Nodes\n3\n1 0 0 0\n2 1 0 0\n3 0 1 0\n$EndNodes\n"
                    "$Elements\n1\n1 2 2 1 1 1 2 3\n$EndElements\n")
    case.write_text(f'solver = "fem"\nname = "m"\n[mesh]\nkind = "file"\npath = "{mesh.name}"\n'
                    '[[boundary.dirichlet]]\nwhere = { x = 0.0 }\nvalue = 0.0\n[output]\nplots = false\n')
    return ["run", str(case), "--out", str(folder / "ascii-run"), "--quiet", "--no-plots"], kind


@pytest.mark.parametrize("chunk", _chunks(PATH_CHUNKS, DEFAULT_PATH_CHUNKS))
def test_generated_non_ascii_paths_with_ascii_streams_give_the_utf8_outcome(chunk, tmp_path, monkeypatch):
    rng = random.Random(f"{SEED}:r4-path:{chunk}")
    counts, outcomes, failures = Counter(), Counter(), []
    with outer_limit():
        for i in range(PATH_CHUNK):
            argv, kind = _path_input(rng, tmp_path, i)
            counts[kind] += 1
            try:
                code, code_utf8, said, u_err = _run_both(argv, monkeypatch)
            except Exception as exc:  # noqa: BLE001 - what the test looks for
                failures.append(f"{kind} {argv}: {_describe(exc)}")
                continue
            outcomes[code] += 1
            try:
                said.decode("ascii")
            except UnicodeDecodeError:
                failures.append(f"{kind}: non-ASCII bytes written to an ASCII stream")
            expected = 2 if kind in ("bad-set", "missing") else 0
            if code != code_utf8 or code != expected:
                failures.append(f"{kind} {argv}: exit {code} (UTF-8 streams: {code_utf8}; expected {expected}): "
                                f"{said[-300:]!r} / {u_err[-300:]}")
            if kind in ("run", "mesh") and code == 0:
                out = Path(argv[argv.index("--out") + 1])
                if not (out / "manifest.json").is_file():
                    failures.append(f"{kind}: no result in {out}")
    _report("non-ASCII paths, ASCII streams", chunk, counts, outcomes)
    assert not failures, "\n".join(failures[:10])


def test_the_default_suite_and_the_soak_cover_each_class():
    assert DEFAULT_INT_CHUNKS * INT_CHUNK >= 100 and DEFAULT_PATH_CHUNKS * PATH_CHUNK >= 16
    assert INT_CHUNKS > DEFAULT_INT_CHUNKS and PATH_CHUNKS > DEFAULT_PATH_CHUNKS
