"""The duplex frame clock on a fake clock: wake-ups on fixed boundaries, late ones skip, never drift."""

from __future__ import annotations

import asyncio

from orchestrator.duplex.frame_ticker import FrameTicker
from tests.stages.scheduler_harness import FakeClock


def test_ticks_land_on_the_period_boundaries_and_a_late_wake_up_skips_the_missed_ones():
    clock = FakeClock()
    lateness = iter([0.0, 0.03, 0.25, 0.0])  # the third wake-up comes 250 ms late

    async def sleep(seconds: float) -> None:
        clock.t += seconds + next(lateness)

    async def ticks() -> list[float]:
        ticker = FrameTicker(0.08, clock, sleep)
        return [round(await ticker.next(), 6) for _ in range(4)]

    # boundaries at 0.08 k: 0.08; 0.16 (woke 0.19); 0.24 (woke 0.49); then 0.56, not 0.32/0.40/0.48
    assert asyncio.run(ticks()) == [0.08, 0.19, 0.49, 0.56]
