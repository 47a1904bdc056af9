"""Prometheus metrics of one server: sessions, first-audio latency, RTF, stages, KV."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from stages.engine import StageStatus

TTFP_BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)


class StageCollector(Collector):
    """Per-stage queue depth, batch size, preemptions and KV blocks, read at scrape time."""

    def __init__(self, statuses: Callable[[], Iterable[StageStatus]]) -> None:
        self.statuses = statuses

    def collect(self):
        families = {
            "requests": GaugeMetricFamily("liveserve_stage_requests", "Requests held by the stage", labels=["stage"]),
            "ready": GaugeMetricFamily("liveserve_stage_queue_depth", "Requests with work ready", labels=["stage"]),
            "batch": GaugeMetricFamily("liveserve_stage_batch_size", "Requests in the last step", labels=["stage"]),
            "preempt": GaugeMetricFamily("liveserve_stage_preemptions", "Preemptions so far", labels=["stage"]),
            "used": GaugeMetricFamily("liveserve_kv_blocks_used", "KV blocks in use", labels=["stage"]),
            "free": GaugeMetricFamily("liveserve_kv_blocks_free", "KV blocks free", labels=["stage"]),
        }
        for s in self.statuses():
            for key, value in (("requests", s.num_requests), ("ready", s.num_ready), ("batch", s.last_batch_size),
                               ("preempt", s.num_preemptions), ("used", s.kv_blocks_used), ("free", s.kv_blocks_free)):
                families[key].add_metric([s.name], value)
        yield from families.values()


class ServerMetrics:
    """The server's registry; sessions report into it, /metrics renders it."""

    def __init__(self, statuses: Callable[[], Iterable[StageStatus]]) -> None:
        self.registry = CollectorRegistry()
        self.live_sessions = Gauge("liveserve_live_sessions", "Open realtime sessions", registry=self.registry)
        self.rejected_sessions = Counter("liveserve_rejected_sessions", "Sessions refused at capacity",
                                         registry=self.registry)
        self.ttfp = Histogram("liveserve_audio_ttfp_seconds", "End of user turn to first audio delta",
                              buckets=TTFP_BUCKETS, registry=self.registry)
        self.rtf = Histogram("liveserve_audio_rtf", "Response generation time over audio duration",
                             buckets=RTF_BUCKETS, registry=self.registry)
        self.underruns = Counter("liveserve_playback_underruns", "Client playback underruns (as modelled)",
                                 registry=self.registry)
        self.registry.register(StageCollector(statuses))

    def observe_ttfp(self, seconds: float) -> None:
        self.ttfp.observe(seconds)

    def observe_rtf(self, rtf: float) -> None:
        self.rtf.observe(rtf)

    def render(self) -> bytes:
        return generate_latest(self.registry)
