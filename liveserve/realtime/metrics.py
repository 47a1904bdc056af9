"""Prometheus metrics of one server: sessions, admission, first-audio and frame latency, RTF, stages, scheduling, KV."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from liveserve.admission import DECISIONS, AdmissionGate, KVWatch
from liveserve.dashboard.recent import RecentHistogram
from orchestrator.session.events import TurnUsage, UnheardWork
from stages.engine import StageStatus

if TYPE_CHECKING:
    from orchestrator.interaction.controller import InteractionController

TTFP_BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
FRAME_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.25, 0.4, 0.6, 1.0, 1.5, 2.0, 4.0)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)
UNITS_BY_STAGE = {"thinker": "text_tokens", "talker": "codec_frames", "vocoder": "vocoder_frames"}


class StageCollector(Collector):
    """Per-stage queue depth, batch size, preemptions, steps run (count, positions, wall time) and KV
    blocks (used, free, peak, and held integrated over time), read at scrape time."""

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
            "peak": GaugeMetricFamily("liveserve_kv_blocks_peak", "Most KV blocks in use at once", labels=["stage"]),
            "held": CounterMetricFamily("liveserve_kv_block_seconds", "KV blocks in use, integrated over time",
                                        labels=["stage"]),
            "steps": CounterMetricFamily("liveserve_stage_steps", "Steps that ran a batch", labels=["stage"]),
            "tokens": CounterMetricFamily("liveserve_stage_step_tokens", "Positions computed by the stage's steps",
                                          labels=["stage"]),
            "busy": CounterMetricFamily("liveserve_stage_busy_seconds", "Wall time of the stage's steps",
                                        labels=["stage"]),
        }
        for s in self.statuses():
            for key, value in (("requests", s.num_requests), ("ready", s.num_ready), ("batch", s.last_batch_size),
                               ("preempt", s.num_preemptions), ("used", s.kv_blocks_used), ("free", s.kv_blocks_free),
                               ("peak", s.kv_blocks_peak), ("held", s.kv_block_seconds), ("steps", s.num_steps),
                               ("tokens", s.num_step_tokens), ("busy", s.busy_s)):
                families[key].add_metric([s.name], value)
        yield from families.values()


class SchedulerCollector(Collector):
    """Per-stage counters of the scheduling policy, read at scrape time.

    A policy's counters (`StageStatus.policy_counters`) are `rounds`, the rounds it
    ordered, and per class the ready requests it put there, summed over rounds; they
    are exported as `liveserve_scheduler_rounds_total{stage}` and
    `liveserve_scheduler_requests_total{stage,class}`. A stage whose policy counts
    nothing (fcfs) has no samples.
    """

    def __init__(self, statuses: Callable[[], Iterable[StageStatus]]) -> None:
        self.statuses = statuses

    def collect(self):
        rounds = CounterMetricFamily("liveserve_scheduler_rounds", "Scheduling rounds ordered by the stage's policy",
                                     labels=["stage"])
        requests = CounterMetricFamily(
            "liveserve_scheduler_requests", "Ready requests per policy class, summed over rounds (urgency: u0 "
            "playback at risk, u1 no first audio yet, u2 the rest, fallbacks without telemetry, speculative work no "
            "one waits for yet, held past p_max, yielded past p_yield while a listener waited at a stage on the same "
            "device, gated: first audio waiting while a reply playing is about to run dry)",
            labels=["stage", "class"])
        for s in self.statuses():
            for name, value in s.policy_counters.items():
                if name == "rounds":
                    rounds.add_metric([s.name], value)
                else:
                    requests.add_metric([s.name, name], value)
        yield rounds
        yield requests


PRELOAD_OUTCOMES = ("admitted", "resident", "too_late", "no_room", "completed", "cancelled", "promoted", "hit")
TRANSFERS = ("stores", "loads_foreground", "loads_background")


class KVTierCollector(Collector):
    """Per-stage figures of a host KV tier (`StageStatus.kv_counters`), read at scrape time.

    Reload seconds are split by whether a ready request waited for them (`critical`)
    or nobody did (`background`: preloads that finished in time). A stage without a
    host tier has no samples.
    """

    def __init__(self, statuses: Callable[[], Iterable[StageStatus]]) -> None:
        self.statuses = statuses

    def collect(self):
        reload = CounterMetricFamily("liveserve_kv_reload_seconds", "Time KV reloads took, by whether a ready "
                                     "request waited for them", labels=["stage", "path"])
        transfer_bytes = CounterMetricFamily("liveserve_kv_transfer_bytes", "Bytes copied between device and host",
                                             labels=["stage", "transfer"])
        transfer_seconds = CounterMetricFamily("liveserve_kv_transfer_seconds", "Time spent copying between device "
                                               "and host (paced to the emulated link when set)",
                                               labels=["stage", "transfer"])
        preloads = CounterMetricFamily("liveserve_kv_preloads", "Speech-triggered preloads by outcome",
                                       labels=["stage", "outcome"])
        evictions = CounterMetricFamily("liveserve_kv_evictions", "Device KV blocks evicted to the host",
                                        labels=["stage", "policy"])
        fallbacks = CounterMetricFamily("liveserve_kv_fallbacks", "Tier work that could not go as planned: rounds a "
                                        "load waited for room, protections lifted for room, a store with no host room",
                                        labels=["stage", "kind"])
        host = GaugeMetricFamily("liveserve_kv_host_blocks", "Host KV blocks in use now and at peak",
                                 labels=["stage", "when"])
        link = GaugeMetricFamily("liveserve_kv_link_gbps", "Device-host link rate measured at start-up",
                                 labels=["stage"])
        for s in self.statuses():
            c = s.kv_counters
            if not c:
                continue
            reload.add_metric([s.name, "critical"], c["reload_critical_s"])
            reload.add_metric([s.name, "background"], c["reload_background_s"])
            for transfer in TRANSFERS:
                transfer_bytes.add_metric([s.name, transfer], c[f"{transfer}_bytes"])
                transfer_seconds.add_metric([s.name, transfer], c[f"{transfer}_seconds"])
            for outcome in PRELOAD_OUTCOMES:
                preloads.add_metric([s.name, outcome], c[f"preloads_{outcome}"])
            for policy in ("lru", "next_use"):
                evictions.add_metric([s.name, policy], c[f"evictions_{policy}"])
            fallbacks.add_metric([s.name, "load_wait"], c["load_waits"])
            fallbacks.add_metric([s.name, "protection_lifted"], c["protections_lifted"])
            fallbacks.add_metric([s.name, "store"], c["stores_skipped"])
            host.add_metric([s.name, "now"], c["host_blocks_used"])
            host.add_metric([s.name, "peak"], c["host_blocks_peak"])
            link.add_metric([s.name], c["link_gbps"])
        yield from (reload, transfer_bytes, transfer_seconds, preloads, evictions, fallbacks, host, link)


class AdmissionCollector(Collector):
    """The duplex-stream admission gate's cap, its admit/reject decisions and its control law's adjustments, read at
    scrape time."""

    def __init__(self, gate: AdmissionGate) -> None:
        self.gate = gate

    def collect(self):
        yield GaugeMetricFamily("liveserve_admission_cap", "Duplex streams the admission gate lets be live now",
                                value=self.gate.cap)
        decisions = CounterMetricFamily("liveserve_admission_decisions",
                                        "Duplex streams admitted or rejected as they start", labels=["decision"])
        decisions.add_metric(["admit"], self.gate.num_admitted)
        decisions.add_metric(["reject"], self.gate.num_rejected)
        yield decisions
        adjustments = CounterMetricFamily("liveserve_admission_adjustments", "Runs of the admission control law "
                                          "(aimd) by what they did to the cap", labels=["action"])
        for action in DECISIONS:
            adjustments.add_metric([action], self.gate.adjustments[action])
        yield adjustments
        last = self.gate.last
        p99 = last.p99_s if last is not None and last.p99_s is not None else math.nan
        yield GaugeMetricFamily("liveserve_admission_interval_p99_seconds", "p99 per-frame latency of the control "
                                "law's last interval (NaN: none yet, or no frames in it)", value=p99)


class SaturationCollector(Collector):
    """Per-stage KV occupancy, fitted fill rate and time to saturation, and per-session resident
    tokens, as last sampled (KVWatch); ended sessions have no samples."""

    def __init__(self, watch: KVWatch) -> None:
        self.watch = watch

    def collect(self):
        families = {
            "occupancy": GaugeMetricFamily("liveserve_kv_occupancy", "KV pool occupancy (0-1)", labels=["stage"]),
            "rate": GaugeMetricFamily("liveserve_kv_fill_rate", "Fitted occupancy growth per second per session "
                                      "(NaN: too few samples)", labels=["stage"]),
            "t_sat": GaugeMetricFamily("liveserve_kv_time_to_saturation_seconds", "Predicted time until the KV "
                                       "pool is full (NaN: not filling)", labels=["stage"]),
            "warning": GaugeMetricFamily("liveserve_kv_saturation_warning", "1 while the pool is predicted to "
                                         "fill sooner than the expected session time", labels=["stage"]),
        }
        for name, f in self.watch.forecasts.items():
            for key, value in (("occupancy", f.occupancy), ("rate", f.fill_rate), ("t_sat", f.time_to_saturation_s),
                               ("warning", int(f.is_warning))):
                families[key].add_metric([name], math.nan if value is None else value)
        yield from families.values()
        resident = GaugeMetricFamily("liveserve_session_resident_tokens", "Thinker tokens whose KV is on the "
                                     "device, over the live sessions (no session is named)", labels=["stat"])
        tokens = list(self.watch.resident_tokens.values())
        if tokens:
            resident.add_metric(["max"], max(tokens))
            resident.add_metric(["mean"], sum(tokens) / len(tokens))
        yield resident


class ServerMetrics:
    """The server's registry; sessions report into it, /metrics renders it. First-audio and frame latencies
    are also kept for the last minutes (`recent_ttfp`, `recent_frames`, on `clock`) for the dashboard."""

    def __init__(self, statuses: Callable[[], Iterable[StageStatus]],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.recent_ttfp = RecentHistogram(TTFP_BUCKETS)
        self.recent_frames = RecentHistogram(FRAME_BUCKETS)
        self.registry = CollectorRegistry()
        self.live_sessions = Gauge("liveserve_live_sessions", "Open realtime sessions", registry=self.registry)
        self.rejected_sessions = Counter("liveserve_rejected_sessions", "Sessions refused at capacity",
                                         registry=self.registry)
        self.ttfp = Histogram("liveserve_audio_ttfp_seconds", "End of user turn to first audio delta",
                              buckets=TTFP_BUCKETS, registry=self.registry)
        self.frame_latency = Histogram("liveserve_duplex_frame_latency_seconds", "Duplex frame due to the "
                                       "thinker's last token of that frame", buckets=FRAME_BUCKETS,
                                       registry=self.registry)
        self.frames = Counter("liveserve_duplex_frames", "Duplex frames done", registry=self.registry)
        self.rtf = Histogram("liveserve_audio_rtf", "Response generation time over audio duration",
                             buckets=RTF_BUCKETS, registry=self.registry)
        self.underruns = Counter("liveserve_playback_underruns", "Client playback underruns (as modelled)",
                                 registry=self.registry)
        self.generated_units = Counter("liveserve_generated_units", "Work generated by ended responses: thinker "
                                       "text tokens, talker codec frames, vocoder 80 ms frames", ["stage"],
                                       registry=self.registry)
        self.unheard_units = Counter("liveserve_unheard_units", "Generated work the listener never heard "
                                     "(barge-in, cancel, truncation), in the units of generated_units", ["stage"],
                                     registry=self.registry)
        self.preemptive_replies = Counter("liveserve_preemptive_replies", "Replies begun at a pause in the user's "
                                          "speech: taken (the pause ended the turn) or dropped unseen", ["outcome"],
                                          registry=self.registry)
        for outcome in ("taken", "dropped"):
            self.preemptive_replies.labels(outcome)
        for stage in UNITS_BY_STAGE:
            self.generated_units.labels(stage)
            self.unheard_units.labels(stage)
        self.registry.register(StageCollector(statuses))
        self.registry.register(SchedulerCollector(statuses))
        self.registry.register(KVTierCollector(statuses))

    def observe_ttfp(self, seconds: float) -> None:
        self.ttfp.observe(seconds)
        self.recent_ttfp.observe(seconds, self.clock())

    def watch_admission(self, gate: AdmissionGate, watch: KVWatch) -> None:
        """Export `gate`'s cap and decisions and `watch`'s KV forecasts from now on."""
        self.registry.register(AdmissionCollector(gate))
        self.registry.register(SaturationCollector(watch))

    def observe_frame(self, latency_s: float) -> None:
        self.frame_latency.observe(latency_s)
        self.frames.inc()
        self.recent_frames.observe(latency_s, self.clock())

    def observe_rtf(self, rtf: float) -> None:
        self.rtf.observe(rtf)

    def count_session(self, controller: InteractionController) -> None:
        """Add a closed session's playback underruns and preemptive replies."""
        self.underruns.inc(controller.num_underruns)
        self.preemptive_replies.labels("taken").inc(controller.num_drafts_taken)
        self.preemptive_replies.labels("dropped").inc(controller.num_drafts_dropped)

    def count_generated(self, usage: TurnUsage) -> None:
        """Add an ended response's work, per stage."""
        for stage, units in UNITS_BY_STAGE.items():
            self.generated_units.labels(stage).inc(getattr(usage, units))

    def count_unheard(self, counted: dict[str, int], latest: UnheardWork) -> dict[str, int]:
        """Count an item's `latest` unheard figure given what was already `counted` for it, per stage.

        Adds only how far `latest` exceeds `counted` (a counter never goes down, so a
        smaller later figure adds nothing) and returns the item's new counted amounts.
        """
        raised = {}
        for stage, units in UNITS_BY_STAGE.items():
            raised[stage] = max(counted.get(stage, 0), getattr(latest, units))
            self.unheard_units.labels(stage).inc(raised[stage] - counted.get(stage, 0))
        return raised

    def render(self) -> bytes:
        return generate_latest(self.registry)
