"""The Numba emitter of the LBM kernel plan (``kernel_plan.py``): Python source that ``kernels_numba`` compiles
with ``numba.cuda.jit``.

The physics is not in the text: the kernels call ``physics.physics_for(compute_dtype, jit=...)``, the very
functions the NumPy reference evaluates, compiled as device functions and bound by name in the kernels'
namespace (``kernels_numba.compiled_kernels``). Positions come from the plan's layouts, unrolled over the 9
directions with the constants of ``lattice.py``; the boundary rules' pieces from ``boundaries/``; population
loads and stores from ``population_code.numba_code`` (through ``load_at`` / ``store_at``, no negative-index
wraparound).

The step, pull and moments kernels are described once in ``step_plan``, the helpers in ``helper_plan``, the 16-bit
pair kernel in ``pair_plan``, and printed here by ``print_numba.PythonPrinter``; only the small utility kernels
(velocity scaling, fill, perturbation, the finite check) are Python templates of this module.

- :func:`kernel_source`: the helpers, per step layout its pull and step kernel, the 16-bit pair kernel, the
  moments of each state layout and the ``lbm_force`` list kernel;
- :func:`bouzidi_source`: the interpolated bounce-back pre-pass (``bouzidi.GATHER`` / ``SCATTER``).

Its twin for CUDA C is ``emit_cuda``; neither imports the other.
"""

from __future__ import annotations

import functools

from hpcsolve.lbm.kernels import prepass_plan as bouzidi
from hpcsolve.lbm.kernels import kernel_plan
from hpcsolve.lbm.rules import link_rules
from hpcsolve.lbm.kernels.layer_code import PYTHON_SOURCE as LAYER_PYTHON
from hpcsolve.lbm.flags import FLUID
from hpcsolve.lbm.kernels import helper_plan, pair_plan, step_plan
from hpcsolve.lbm.kernels.population_code import numba_code
from hpcsolve.lbm.kernels.print_numba import PythonPrinter, emit_ops


def list_kernel_python(kernel, code) -> str:
    """A link-list kernel of ``kernel_plan.ListKernel`` as Python for ``numba.cuda.jit`` (one thread per entry
    k); ``load_pop`` is the caller's."""
    body = "\n".join("        " + line for line in emit_ops(kernel.body, None, code))
    args = ", ".join(name for name, _ in kernel.args)
    return f"""

def {kernel.name}({args}, n):
    # {kernel.doc}
    k = cuda.grid(1)
    if k < n:
{body}
"""


def _tables(layout) -> str:
    """The in-place outlet table arguments of a step layout that keeps the own velocity in a table."""
    return "out_cells, own_u, n_out, " if layout.own_velocity == "table" else ""


def _step_kernel_python(layout, collision: str, code, cpt: int, block_x: int, layer: bool = False) -> str:
    """The fused step kernel of one step layout (``step_plan.step_kernel``), the twin of ``emit_cuda``'s."""
    kernel = step_plan.step_kernel(layout, cpt, block_x, collision, layer)
    return PythonPrinter(code, collision, layer).kernel_text(kernel)


def _pull_python(layout, rules, code) -> str:
    """``pull_cell_<tag>`` of one step layout (``step_plan.pull_cell``), the twin of ``emit_cuda``'s."""
    return PythonPrinter(code).function_text(step_plan.pull_cell(layout, rules))


def _pair_kernel_python(collision: str, code, block_x: int, exchange: str, layer: bool = False) -> str:
    """``lbm_step_pair`` (``pair_plan``): int32 views ``AW`` / ``BW`` of the 16-bit arrays after them; ``half_lo`` /
    ``half_hi`` widen the low / high 16 bits of a word to float32 and ``pack_halves`` rounds two float32 to 16 bits
    (nearest even) and packs them (the codec's ``numba_pair_functions``); ``exchange``: ``PythonPrinter``'s."""
    return PythonPrinter(code, collision, layer, exchange).kernel_text(pair_plan.pair_kernel(block_x, layer))


def _moments_python(state, code) -> str:
    """drho, ux, uy of the stored state in ``state`` layout (``step_plan.moments_kernel``)."""
    return PythonPrinter(code).kernel_text(step_plan.moments_kernel(state))


def _helpers_python(code) -> str:
    """The device helpers of the step kernels (loads, the outlet rule's own velocity, the hash-table lookups)
    and the small kernels around them (velocity scaling, fill, perturbation, the finite check)."""
    printer = PythonPrinter(code)
    helpers = "\n\n".join(printer.function_text(f) for f in (
        step_plan.own_velocity(), helper_plan.table_home(), helper_plan.boundary_velocity(),
        helper_plan.outlet_index()))
    return f'''
def load_pop(A, k):
    return {code.decode("load_at(A, k)")}


{helpers}

def lbm_scale_velocity(full, s, out, n):
    k = cuda.grid(1)
    if k < n:
        out[k] = CT(full[k] * s)


def lbm_fill_zero(A, n):
    k = cuda.grid(1)
    if k < n:
        A[k] = 0


def lbm_perturb(A, flags, weights, N, amplitude, seed):
    # A[i, x] += amplitude * w_i * r, r in [-1, 1) from an integer hash of (i * N + x, seed)
    k = cuda.grid(1)
    if k >= 9 * N:
        return
    i = k // N
    cell = k - i * N
    if (flags[cell] & 0x7f) != {FLUID}:
        return
    h = (k * 2654435761 + seed * 40503 + 12345) & 0xFFFFFFFF
    h = ((h >> 16) ^ h) * 73244475 & 0xFFFFFFFF
    h = ((h >> 16) ^ h) * 73244475 & 0xFFFFFFFF
    h = (h >> 16) ^ h
    r = CT(h * (2.0 / 4294967296.0) - 1.0)
    A[k] = {code.encode("(load_pop(A, k) + amplitude * weights[i] * r)")}


def lbm_nonfinite(A, n, out):
    k = cuda.grid(1)
    if k < n:
        v = float64({"load_pop(A, k)" if code.integer_codes else "A[k]"})
        if not (v - v == 0.0):
            out[0] = 1
'''


def kernel_source(policy, collision: str, cpt: int = 1, block_x: int = 256, pairs: bool = False,
                  exchange: str = "smem", in_place: bool = False, characteristic: bool = False,
                  layer: bool = False) -> str:
    """Python source of the kernels ``kernels_numba.compiled_kernels`` compiles, emitted from the plan
    (``kernel_plan.step_layouts``, ``boundaries.link_rules``): the helpers, per step layout its pull and step
    kernel (two-buffer ``lbm_step``, or in place the AA pair ``lbm_step_aa_even`` / ``_odd``), the 16-bit pair
    kernel where ``pairs``, the moments of each state layout and the force list kernel; loads and stores from
    ``population_code.numba_code``; ``characteristic``: the outlet rule looks up the reference outflow
    (``boundaries.outlet.characteristic_outlet``); ``layer``: the collision adds the absorbing layer's bulk
    relaxation (``boundaries.layer``; the step kernels take its four arguments after omega_minus)."""
    code = numba_code(policy)
    rules = link_rules(characteristic)
    parts = [_helpers_python(code)] + ([LAYER_PYTHON] if layer else [])
    for layout in kernel_plan.step_layouts(in_place):
        parts.append(_pull_python(layout, rules, code))
        parts.append(_step_kernel_python(layout, collision, code, 1 if layout.in_place else cpt, block_x, layer))
    if pairs and not in_place:
        parts.append(_pair_kernel_python(collision, code, block_x, exchange, layer))
    for state in dict.fromkeys(layout.reads for layout in kernel_plan.step_layouts(in_place)):
        parts.append(_moments_python(state, code))
    parts.append(list_kernel_python(kernel_plan.FORCE_KERNEL, code))
    return "\n\n".join(parts)


@functools.lru_cache(maxsize=None)
def bouzidi_source(policy) -> str:
    """Python source of the interpolated bounce-back pre-pass for one policy: the list kernels
    ``bouzidi.GATHER`` / ``SCATTER`` (the twin of ``kernels_cupy.bouzidi_source``)."""
    code = numba_code(policy)
    return (f"def load_pop(A, k):\n    return {code.decode('A[k]')}\n"
            + "".join(list_kernel_python(k, code) for k in (bouzidi.GATHER, bouzidi.SCATTER)))
