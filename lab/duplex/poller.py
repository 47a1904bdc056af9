"""The server's own figures during a run: its /metrics, scraped on a fixed schedule."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping

from lab.duplex.records import MetricsPoll
from lab.prometheus import labelled, sample_key

STAGE = "thinker"
STAGE_FIELDS = {  # per-stage gauges, read for the thinker
    "liveserve_kv_occupancy": "occupancy",
    "liveserve_kv_time_to_saturation_seconds": "t_sat_s",
    "liveserve_kv_saturation_warning": "saturation_warning",
}
SERVER_FIELDS = {"liveserve_live_sessions": "live_sessions", "liveserve_admission_cap": "admission_cap"}
RESIDENT_TOKENS = "liveserve_session_resident_tokens"


def read_poll(t: float, samples: Mapping[str, float]) -> MetricsPoll:
    """The figures of one scrape (`lab.prometheus` samples) taken at `t`; absent metrics stay None."""
    fields = {field: samples.get(name) for name, field in SERVER_FIELDS.items()}
    fields.update({field: samples.get(sample_key(name, {"stage": STAGE})) for name, field in STAGE_FIELDS.items()})
    tokens = {labels.get("stat", ""): value for labels, value in labelled(samples, RESIDENT_TOKENS, {})}
    return MetricsPoll(t, resident_tokens=tokens, **fields)


class MetricsPoller:
    """Scrapes every `interval_s` of `clock` (run seconds) until `run(until)` ends.

    A poll is stamped with the middle of its request; a poll that fails is counted in
    `num_failed` and skipped, as are the slots a slow poll overran.
    """

    def __init__(self, scrape: Callable[[], dict[str, float]], clock: Callable[[], float],
                 interval_s: float = 0.5) -> None:
        self.scrape, self.clock, self.interval_s = scrape, clock, interval_s
        self.polls: list[MetricsPoll] = []
        self.num_failed = 0

    async def run(self, until: float) -> None:
        due = 0.0
        while due <= until:
            await asyncio.sleep(due - self.clock())
            started = self.clock()
            try:
                samples = await asyncio.to_thread(self.scrape)
            except (OSError, ValueError):
                self.num_failed += 1
            else:
                self.polls.append(read_poll((started + self.clock()) / 2, samples))
            due = (math.floor(self.clock() / self.interval_s) + 1) * self.interval_s
