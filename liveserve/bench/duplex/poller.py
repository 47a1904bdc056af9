"""The server's own figures during a run: GET /metrics on a fixed schedule."""

from __future__ import annotations

import asyncio
import math
import urllib.parse
import urllib.request
from collections.abc import Callable

from prometheus_client.parser import text_string_to_metric_families

from liveserve.bench.duplex.records import MetricsPoll

STAGE = "thinker"
STAGE_FIELDS = {  # per-stage gauges, read for the thinker
    "liveserve_kv_occupancy": "occupancy",
    "liveserve_kv_time_to_saturation_seconds": "t_sat_s",
    "liveserve_kv_saturation_warning": "saturation_warning",
}
SERVER_FIELDS = {"liveserve_live_sessions": "live_sessions", "liveserve_admission_cap": "admission_cap"}
RESIDENT_TOKENS = "liveserve_session_resident_tokens"


def read_poll(t: float, text: str) -> MetricsPoll:
    """The figures of one /metrics text taken at `t`; absent metrics stay None."""
    fields: dict[str, float] = {}
    tokens: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == RESIDENT_TOKENS:
                tokens[sample.labels.get("session", "")] = sample.value
            elif sample.name in SERVER_FIELDS:
                fields[SERVER_FIELDS[sample.name]] = sample.value
            elif sample.name in STAGE_FIELDS and sample.labels.get("stage") == STAGE:
                fields[STAGE_FIELDS[sample.name]] = sample.value
    return MetricsPoll(t, resident_tokens=tokens, **fields)


def metrics_fetcher(realtime_url: str, timeout_s: float = 5.0) -> Callable[[], str]:
    """A blocking GET of /metrics on the server whose realtime endpoint is `realtime_url` (ws://)."""
    parts = urllib.parse.urlsplit(realtime_url)
    scheme = "https" if parts.scheme == "wss" else "http"
    url = urllib.parse.urlunsplit((scheme, parts.netloc, "/metrics", "", ""))

    def fetch() -> str:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return response.read().decode()

    return fetch


class MetricsPoller:
    """Polls every `interval_s` of `clock` (run seconds) until `run(until)` ends.

    A poll is stamped with the middle of its request; a poll that fails is counted in
    `num_failed` and skipped, as are the slots a slow poll overran.
    """

    def __init__(self, fetch: Callable[[], str], clock: Callable[[], float], interval_s: float = 0.5) -> None:
        self.fetch, self.clock, self.interval_s = fetch, clock, interval_s
        self.polls: list[MetricsPoll] = []
        self.num_failed = 0

    async def run(self, until: float) -> None:
        due = 0.0
        while due <= until:
            await asyncio.sleep(due - self.clock())
            started = self.clock()
            try:
                text = await asyncio.to_thread(self.fetch)
            except (OSError, ValueError):
                self.num_failed += 1
            else:
                self.polls.append(read_poll((started + self.clock()) / 2, text))
            due = (math.floor(self.clock() / self.interval_s) + 1) * self.interval_s
