"""The time a run has left, on a clock that tests replace."""

from __future__ import annotations

import time
from collections.abc import Callable


class Deadline:
    """Ends `budget_s` seconds after it is made, by `clock`; `within` gives a nearer one for a part of the run."""

    def __init__(self, budget_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.ends = clock() + budget_s

    @property
    def left_s(self) -> float:
        return max(0.0, self.ends - self.clock())

    def allows(self, seconds: float) -> bool:
        """Whether `seconds` of work would end before the deadline."""
        return seconds <= self.left_s

    def within(self, cap_s: float | None) -> Deadline:
        """A deadline `cap_s` from now, or this one where it is nearer (None: this one)."""
        nearer = Deadline(0.0, self.clock)
        nearer.ends = self.ends if cap_s is None else min(self.ends, self.clock() + cap_s)
        return nearer

    def reason(self, what: str, needs_s: float) -> str:
        """Why `what` is skipped: it needs about `needs_s` and less is left."""
        return f"{what} needs about {needs_s:.0f} s and {self.left_s:.0f} s are left of the budget"
