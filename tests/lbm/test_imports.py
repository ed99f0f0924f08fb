"""The import structure of hpcsolve.lbm: no cycles, the Numba backend independent of the CuPy one,
no backend-name comparisons.

The graph counts every ``import`` in the package's modules, at module level and inside functions
(a lazy import only hides a cycle). Imports through ``hpcsolve.core.backends`` are outside it: the backend
registry imports each backend's kernel module by name, and those modules import the stepper
interface, which asks the registry for a backend, by design.
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import hpcsolve
import hpcsolve.lbm
from hpcsolve.core.backends import BACKENDS

PACKAGE = "hpcsolve.lbm"
ROOT = Path(hpcsolve.lbm.__file__).parent
#: the modules of hpcsolve.lbm and of its subpackage hpcsolve.lbm.boundaries (a package's __init__ by its name)
MODULES = sorted(
    f"{PACKAGE}.{p.relative_to(ROOT).with_suffix('').as_posix().replace('/', '.')}".removesuffix(".__init__")
    for p in ROOT.rglob("*.py") if p.relative_to(ROOT).as_posix() != "__init__.py")
#: every hpcsolve module, and the packages with code in their __init__ (hpcsolve/lbm/__init__.py is empty)
ALL_MODULES = ({m.name for m in pkgutil.walk_packages(hpcsolve.__path__, "hpcsolve.") if not m.ispkg}
               | {m for m in MODULES})


def _tree(module: str) -> ast.Module:
    rel = Path(*module.split(".")[2:])
    path = ROOT / rel.with_suffix(".py")
    return ast.parse((path if path.exists() else ROOT / rel / "__init__.py").read_text())


def _imports(module: str, within: str = PACKAGE) -> set[str]:
    """The modules under ``within`` that ``module`` imports anywhere in its body."""
    out = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}   # from hpcsolve.lbm import bouzidi
    return {m for m in out if m in ALL_MODULES and m.startswith(within + ".") and m != module}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}      # 1 on the current path, 2 done
    path: list[str] = []

    def visit(m):
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return path[path.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        state[m] = 2
        path.pop()
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_lbm_import_graph_has_no_cycle():
    graph = {m: _imports(m) for m in MODULES}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))
    steppers, kernels = f"{PACKAGE}.steppers", f"{PACKAGE}.kernels"
    assert f"{steppers}.kernels_cupy" not in graph[f"{steppers}.kernels_numba"]
    assert f"{kernels}.emit_cuda" not in graph[f"{kernels}.emit_numba"] and (
        f"{kernels}.emit_numba" not in graph[f"{kernels}.emit_cuda"])
    # the cycle bouzidi -> backends -> kernels_cupy -> bouzidi is gone: each Stepper builds its own pre-pass
    # (kernels_cupy.CupyBouzidi, kernels_numba.NumbaPrepass) from the list kernels bouzidi plans
    assert _imports(f"{PACKAGE}.boundaries.bouzidi", "hpcsolve") == {f"{PACKAGE}.{m}" for m in
                                                                    ("lattice", "physics", "flags", "kernels.prepass_plan")}
    # one direction between the two rooms: the boundary rules write their pieces in the kernel plan's vocabulary,
    # the kernel room reaches the rules through hpcsolve.lbm.rules (imported by name on first use), never by import
    kernel_modules = [m for m in MODULES if m.startswith(kernels + ".")]
    assert kernel_modules and not {m: sorted(n for n in graph[m] if ".boundaries" in n or ".steppers" in n)
                                   for m in kernel_modules if any(".boundaries" in n or ".steppers" in n
                                                                  for n in graph[m])}
    assert any(".kernels." in n for m in MODULES if ".boundaries" in m for n in graph[m])
    # the plan and the boundary rules are the emitters' input: they import no emitter and no stepper
    for m in [f"{kernels}.kernel_plan"] + [m for m in MODULES if ".boundaries" in m]:
        assert not {n for n in graph[m] if n.rsplit(".", 1)[1] in ("kernels_cupy", "kernels_numba", "emit_cuda",
                                                                  "emit_numba", "gpu_common", "runner")}, m


def test_each_lbm_module_imports_first_and_numba_needs_no_cupy():
    """Every module imports as the first hpcsolve module of an interpreter (no order-dependent cycle);
    importing the Numba kernels loads neither the CuPy kernels nor cupy."""
    script = f"""
import sys
for name in {MODULES!r}:
    for loaded in [m for m in sys.modules if m.startswith("hpcsolve")]:
        del sys.modules[loaded]
    __import__(name)
for loaded in [m for m in sys.modules if m.startswith("hpcsolve")]:
    del sys.modules[loaded]
import hpcsolve.lbm.steppers.kernels_numba
print(sorted(m for m in sys.modules if m in ("cupy", "hpcsolve.lbm.steppers.kernels_cupy")))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_no_backend_name_is_compared_in_lbm():
    """Code in hpcsolve.lbm asks the Backend object; a backend's name appears only as a Stepper's
    ``backend`` label."""
    found = []
    for module in MODULES:
        tree = _tree(module)
        if module == f"{PACKAGE}.steppers":      # the registration of each backend's stepper (the registry)
            continue
        labels = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                  and [getattr(t, "id", None) for t in node.targets] == ["backend"]}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in BACKENDS and id(node) not in labels:
                found.append(f"{module}:{node.lineno} {node.value!r}")
    assert not found, found
