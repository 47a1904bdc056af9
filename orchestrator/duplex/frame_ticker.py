"""The duplex frame clock: wake-ups on a period's boundaries, with the sleep injectable for tests."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable


class FrameTicker:
    """`await next()` returns at the next boundary of `period_s` (the clock time it woke at).

    Boundaries are fixed from the first call: a late wake-up skips the boundaries it missed and never
    drifts. `sleep` waits that many seconds (asyncio.sleep; a test passes one that advances a fake clock).
    """

    def __init__(self, period_s: float, clock: Callable[[], float],
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.period_s = period_s
        self.clock = clock
        self.sleep = sleep
        self._due: float | None = None

    async def next(self) -> float:
        now = self.clock()
        due = (now if self._due is None else self._due) + self.period_s
        if due < now:
            due += self.period_s * math.ceil((now - due) / self.period_s)
        self._due = due
        await self.sleep(due - now)
        return self.clock()
