"""The CUDA C emitter of the LBM kernel plan (``kernel_plan.py``): the source ``kernels_cupy`` compiles with CuPy.

``physics.physics_for(dtype)`` is *traced*: its functions (moments, equilibrium, BGK/TRT collision, the boundary
rules' formulas) are called with symbolic values that record every ``+ - * /`` as one line of CUDA C, in the order
the NumPy reference evaluates them, so the reference and the kernel evaluate the same expressions (the GPU may
contract a*b+c into an FMA) and no physics constant is typed twice. Positions come from the plan's layouts, the
boundary rules' pieces from ``boundaries/``, population loads and stores from ``population_code.cuda_code``.

The step, pull and moments kernels are described once in ``step_plan`` (the plan's statement vocabulary,
``kernel_plan.Let`` / ``If`` / ``Unrolled`` / ...), the device helpers in ``helper_plan``, the 16-bit pair kernel in
``pair_plan``, and printed here by ``print_cuda.CPrinter``; only the header and typedefs are C of this module.

- :func:`kernel_source`: the step kernels of the step layouts (``lbm_step``, or ``lbm_step_aa_even`` / ``_odd``),
  the 16-bit pair kernel ``lbm_step_pair`` (two buffers), the moments of each state layout and ``lbm_force``;
- :func:`bouzidi_source`: the interpolated bounce-back pre-pass (``bouzidi.GATHER`` / ``SCATTER``).

Its twin for Numba is ``emit_numba``; neither imports the other.
"""

from __future__ import annotations

import functools

import numpy as np

from hpcsolve.lbm.kernels import prepass_plan as bouzidi
from hpcsolve.lbm.kernels import kernel_plan
from hpcsolve.lbm import physics
from hpcsolve.lbm.rules import link_rules
from hpcsolve.lbm.kernels.layer_code import ARGS as LAYER_ARGS, C_SOURCE as LAYER_C
from hpcsolve.lbm.kernels.population_code import cuda_code
from hpcsolve.lbm.kernels import helper_plan, pair_plan, step_plan
from hpcsolve.lbm.kernels.print_cuda import C_ARG, CPrinter, emit_ops


# Source generation

def layer_source(layer: bool) -> str:
    """The absorbing layer's ``layer_coefficient`` (``boundaries.layer.C_SOURCE``) where the kernels have one."""
    return LAYER_C if layer else ""


def _prelude_c(code) -> str:
    """Header, the real_t / store_t typedefs and the population load / store of every kernel source;
    the load and store expressions are the policy's (``population_code.cuda_code``)."""
    return (f"{code.header}\ntypedef {code.real_t} real_t;\ntypedef {code.store_t} store_t;\n"
            f"__device__ __forceinline__ real_t load_pop(const store_t v) {{ return {code.decode('v')}; }}\n"
            f"__device__ __forceinline__ store_t store_pop(const real_t v) {{ return {code.encode('v')}; }}\n")


# ------------------------------------------------------------------------------------------------
# Emitting the kernel plan (hpcsolve/lbm/kernels/kernel_plan.py) as CUDA C

def _layer_c(layer: bool) -> tuple[str, str, str]:
    """(kernel parameters, collide_values / collide_store parameter, its argument at cell (x, y)) of the absorbing
    layer (``boundaries.layer``), empty strings without one."""
    if not layer:
        return "", "", ""
    return ("".join(f", const real_t {a}" for a in LAYER_ARGS), ", const real_t layer",
            ", layer_coefficient({x}, {y}, " + ", ".join(LAYER_ARGS) + ")")


def list_kernel_c(kernel, P, code) -> str:
    """A link-list kernel of ``kernel_plan.ListKernel`` as CUDA C (one thread per list entry k)."""
    lines, _ = emit_ops(kernel.body, P, code, None, {}, f"{kernel.name}_")
    args = ", ".join(f"{C_ARG[kind]} {name}" for name, kind in kernel.args)
    nl = "\n    "
    return f"""
// {kernel.doc}
extern "C" __global__ void {kernel.name}({args}, const long long n) {{
  const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (k < n) {{
    {nl.join(lines)}
  }}
}}
"""


def _helpers_c(code, P, collision: str, layer: bool) -> str:
    """The prelude of a step source: the population code, the hash-table lookups of the boundary cells, the outlet
    rule's own velocity, the absorbing layer's coefficient and the traced collision (``collide_values``,
    ``collide_store``), described in ``helper_plan`` / ``step_plan``."""
    printer = CPrinter(P, code)
    helpers = "\n".join(printer.function_text(f) for f in (
        helper_plan.table_home(), helper_plan.boundary_velocity(), step_plan.own_velocity(),
        helper_plan.outlet_index(), helper_plan.outlet_velocity()))
    collide = "\n".join(CPrinter(P, code).function_text(f) for f in (
        helper_plan.collide_values(collision, layer), helper_plan.collide_store(collision, layer, code.stochastic)))
    return f"{_prelude_c(code)}\n{helpers}\n{layer_source(layer)}\n{collide}"


@functools.lru_cache(maxsize=None)
def kernel_source(policy, collision: str, cpt: int = 1, block_x: int = 256, in_place: bool = False,
                  characteristic: bool = False, layer: bool = False, max_registers: int | None = None) -> str:
    """CUDA C of the step, moments and force kernels for one policy and collision model;
    ``cpt`` cells per thread, ``block_x`` threads per block (both along x); ``in_place``: the AA-pattern
    step kernels ``lbm_step_aa_even`` / ``_odd`` and ``lbm_moments_odd`` (hpcsolve/lbm/steppers/inplace.py) instead of
    ``lbm_step``; ``characteristic``: outlet links look up their reference outflow
    (``boundaries.outlet.characteristic_outlet``), else the outlet rule runs at drho_w = 0; ``layer``: the
    collision adds the absorbing layer's bulk relaxation (``boundaries.layer``; the kernels take its four
    arguments after omega_minus); ``max_registers``: the step kernels' register cap (``__maxnreg__``). Emitted from the
    plan (``kernel_plan.step_layouts``, ``boundaries.link_rules``)."""
    code = cuda_code(policy)
    P = physics.physics_for(np.dtype(policy.compute))
    rules = link_rules(characteristic)
    layouts = kernel_plan.step_layouts(in_place)
    parts = [_helpers_c(code, P, collision, layer)]
    for layout in layouts:
        parts.append(CPrinter(P, code).function_text(step_plan.pull_cell(layout, rules)))
        step = step_plan.step_kernel(layout, 1 if layout.in_place else cpt, block_x, collision, layer)
        parts.append(CPrinter(P, code, layer, block_x, max_registers).kernel_text(step))
    if not in_place and code.pair_words is not None:
        w = code.pair_words
        parts.append(f"{w['prelude']}\ntypedef {w['word']} word_t;\n"
                     + CPrinter(P, code, layer, block_x, max_registers).kernel_text(pair_plan.pair_kernel(block_x, layer)))
    for state in dict.fromkeys(layout.reads for layout in layouts):     # the state layouts a step starts from
        parts.append(CPrinter(P, code).kernel_text(step_plan.moments_kernel(state)))
    parts.append(list_kernel_c(kernel_plan.FORCE_KERNEL, P, code))
    return "".join(parts)


@functools.lru_cache(maxsize=None)
def bouzidi_source(policy) -> str:
    """CUDA C of the interpolated bounce-back pre-pass for one policy: the list kernels ``bouzidi.GATHER``
    (link value = ``physics.interpolated_bounce_back`` of the two stored populations, traced like the step
    kernel, into V) and ``bouzidi.SCATTER`` (V -> the links' slots). Two launches per step instead of the
    ~15 array operations of the NumPy-style pre-pass (whose launch overhead, not its bytes, dominated small
    grids: 180 us per step on the 2D-1 cylinder at D = 80, H200)."""
    code = cuda_code(policy)
    P = physics.physics_for(np.dtype(policy.compute))
    return _prelude_c(code) + "".join(list_kernel_c(k, P, code) for k in (bouzidi.GATHER, bouzidi.SCATTER))
