"""A stand-in for a run's stop request (hpcsolve.core.interrupts) that tests hand to the runner."""


class StopAfter:
    """A stop request that turns on at the n-th time the runner looks at it."""

    def __init__(self, n):
        self.n, self.seen = n, 0

    @property
    def requested(self):
        self.seen += 1
        return self.seen >= self.n
