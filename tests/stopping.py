"""A stand-in for a run's stop request (hpcsolve.core.interrupts) that tests hand to the runner, and a run it
stopped part way (the checkpoint tests' common folder)."""

from pathlib import Path

import pytest

from hpcsolve.core.cases import load_case
from hpcsolve.core.checkpoint import list_checkpoints
from hpcsolve.core.errors import RunInterrupted
from hpcsolve.core.precision import get_precision
from hpcsolve.lbm import runner


class StopAfter:
    """A stop request that turns on at the n-th time the runner looks at it."""

    def __init__(self, n):
        self.n, self.seen = n, 0

    @property
    def requested(self):
        self.seen += 1
        return self.seen >= self.n


ROOT = Path(__file__).parent.parent
CAVITY = ROOT / "cases" / "lid_driven_cavity.toml"
#: a tiny cavity checkpointed every 10 of its 40 steps (8 cells are no validation: without its Ghia reference, whose
#: verdict would add a warning to those the checkpoint tests count)
TINY = ["lattice.resolution=8", "time.steps=40", "time.monitor_interval=10", "time.checkpoint_interval=10",
        "time.output_interval=0.125", "validation.reference='none'"]
NEWEST, OLDER = "checkpoint_0000000020.h5", "checkpoint_0000000010.h5"


def interrupted_run(out: Path, overrides=tuple(TINY)) -> Path:
    """The run folder ``out`` of the tiny cavity (``overrides``: TINY, or more) interrupted at step 20 of 40: checkpoints at steps 10 and 20
    (the damage and integrity tests copy it and tamper with the copy)."""
    with pytest.raises(RunInterrupted):
        runner.run(load_case(CAVITY, list(overrides)), "numpy", get_precision("fp64"), progress=False, stop=StopAfter(2),
                   checkpoint_dir=out)
    assert [p.name for p in list_checkpoints(out)] == [OLDER, NEWEST]
    return out
