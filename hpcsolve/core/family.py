"""The solver-family protocol: what ``hpcsolve.run`` (and through it the CLI, ``compare`` and the
notebooks) needs from a family of solvers, typed once.

A family (``lbm``, ``fem``) is an object registered in :data:`REGISTRY` that provides

- ``describe(case, backend, policy) -> Description``: derived parameters, memory estimates and the
  setup it had to build to know them (LBM geometry, FEM mesh), which ``run`` reuses;
- ``estimate_runtime(case, backend, policy, description) -> dict``: a short timed probe;
- ``check_inputs(case, backend, policy, description) -> dict``: what ``hpcsolve validate`` checks beyond
  ``describe`` without running (a CaseError naming the field; the dict says what was checked);
- ``run(case, backend, policy, *, description, progress, stop, checkpoint_dir, resume) -> Result``,
  whose ``timings`` always hold :data:`SOLVER_SECONDS` (the timed solver part: time stepping, or the
  Krylov solve) and ``total_s``;
- ``verdicts(case, metrics, derived) -> dict`` (optional): the run's values judged against their published or
  analytic references (``hpcsolve.core.verdicts``; ``Result.validation``);
- ``capabilities``: which of :data:`CAPABILITIES` it has (``checkpoint``: writes checkpoints during the
  run; ``resume``: continues from one; ``graceful_stop``: stops cleanly at the next monitor point on
  SIGINT/SIGTERM; ``stability_rule``: ``run`` takes ``force``, and a setting known to blow up is refused without
  it). ``hpcsolve.run`` asks these instead of inspecting signatures.

A new family is a module with such an object and one line in :data:`REGISTRY`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Protocol

from hpcsolve.core.errors import CaseError

#: the timings key every family's Result carries: seconds in the solver proper (what compare times)
SOLVER_SECONDS = "solver_s"
CAPABILITIES = frozenset({"checkpoint", "resume", "graceful_stop", "stability_rule"})


@dataclass
class Description:
    """What a family knows about a case before running it."""

    parameters: dict                       #: derived parameters, JSON-able (shown by validate / --dry-run)
    estimate: Any = None                   #: hpcsolve.core.memory.MemoryEstimate: peak host and device memory
    setup: Any = None                      #: what describe built (geometry, mesh); run() reuses it
    note: str = ""                         #: why the setup was not built (too large), if it was not
    made_for: str = ""                     #: the run it describes (``run.plan``'s key of case, backend, precision)

    @property
    def memory_bytes(self) -> int:
        """Peak memory where the solver state lives: device memory on a GPU backend, else the host's."""
        e = self.estimate
        return int(e.device_bytes if e.device_bytes is not None else e.host_bytes)

    def as_dict(self) -> dict:
        info = dict(self.parameters)
        info.update(self.estimate.summary())
        info["memory_bytes"] = self.memory_bytes
        if self.note:
            info["note"] = self.note
        return info


class Family(Protocol):
    name: str
    capabilities: frozenset

    def describe(self, case, backend, policy) -> Description: ...

    def estimate_runtime(self, case, backend, policy, description: Description) -> dict: ...

    def check_inputs(self, case, backend, policy, description: Description) -> dict: ...

    def run(self, case, backend, policy, *, description: Description | None = None, progress: bool = True,
            stop=None, checkpoint_dir=None, resume=None): ...

    def warmup_case(self, case, description: Description): ...
    #   the case an untimed warm-up runs (compare): a short copy that compiles and fills what a timed run uses, or
    #   the case itself (``warmup_is_whole_run``: always the case itself, counted as a run in compare's predictions)
    warmup_is_whole_run: bool


#: family name -> "module:attribute" of its Family object (imported on first use: the LBM and FEM
#: modules pull in numba/scipy, which a CLI call for the other family need not load)
REGISTRY = {"lbm": "hpcsolve.lbm.runner:FAMILY", "fem": "hpcsolve.fem.runner:FAMILY"}


def get(name: str) -> Family:
    try:
        module, attr = REGISTRY[name].split(":")
    except KeyError:
        raise CaseError.invalid("solver", name, ", ".join(REGISTRY)) from None
    family = getattr(importlib.import_module(module), attr)
    unknown = set(family.capabilities) - CAPABILITIES
    assert not unknown, f"family {name}: unknown capabilities {unknown}"
    return family
