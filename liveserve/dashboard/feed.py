"""What /dashboard/feed serves: the server's state now, and the samples of its recent past a page has not seen."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Protocol

from liveserve.dashboard.series import SeriesLog
from orchestrator.snapshot import PipelineSnapshot, SessionSnapshot
from stages.engine import StageStatus

if TYPE_CHECKING:
    from liveserve.admission import AdmissionGate, KVWatch
    from liveserve.config.loader import LiveServeConfig
    from liveserve.realtime.metrics import ServerMetrics
    from orchestrator.orchestrator import Orchestrator

HISTORY_S = 300  # of samples kept, one a second
SAMPLE_PERIOD_S = 1.0


class ServerView(Protocol):
    """What the feed reads of the realtime server (RealtimeServer has it)."""

    config: LiveServeConfig
    orch: Orchestrator
    gate: AdmissionGate
    kv_watch: KVWatch
    metrics: ServerMetrics
    sessions: Collection
    num_rejected: int  # connections refused at server.max_sessions

    @property
    def num_streams(self) -> int: ...


class DashboardFeed:
    """Samples the stages, the KV tiers and admission every SAMPLE_PERIOD_S (`run`, or `sample`) into a
    SeriesLog of HISTORY_S samples, and answers `state(since)`: sessions, stages, KV, admission and latency
    now, with the samples after number `since`. Stage rates (steps/s, busy share, ready requests per round
    by class, reload seconds per second) are over the last sampling interval. Event loop only."""

    def __init__(self, server: ServerView, clock: Callable[[], float]) -> None:
        self.server, self.clock = server, clock
        self.started_at = clock()
        self.series = SeriesLog(int(HISTORY_S / SAMPLE_PERIOD_S))
        self.rates: dict[str, dict] = {}
        self._last: tuple[float, dict[str, StageStatus]] | None = None

    async def run(self) -> None:
        """`sample` every SAMPLE_PERIOD_S until cancelled."""
        while True:
            self.sample(self.clock())
            await asyncio.sleep(SAMPLE_PERIOD_S)

    def sample(self, now: float) -> None:
        snapshot = self.server.orch.snapshot()
        statuses = {status.name: status for status in snapshot.stages}
        if self._last is not None and now > self._last[0]:
            before_at, before = self._last
            self.rates = {name: _rates(before[name], status, now - before_at)
                          for name, status in statuses.items() if name in before}
        self._last = (now, statuses)
        self.series.append(now - self.started_at, self._figures(snapshot))

    def _figures(self, snapshot: PipelineSnapshot) -> dict[str, float | None]:
        server = self.server
        figures = {"sessions": len(server.sessions), "streams": server.num_streams, "cap": server.gate.cap,
                   "rejected": server.num_rejected + server.gate.num_rejected}
        for kv in _kv_pools(snapshot):
            figures[f"kv.{kv['stage']}.device"] = kv["device"]
            if kv["host"] is not None:
                figures[f"kv.{kv['stage']}.host"] = kv["host"]
        for name, rates in self.rates.items():
            if "reload_critical_ms_per_s" in rates:
                figures[f"reload.{name}.critical"] = rates["reload_critical_ms_per_s"]
                figures[f"reload.{name}.background"] = rates["reload_background_ms_per_s"]
        return figures

    def state(self, since: int = 0) -> dict:
        """The whole view as JSON-ready values (no NaN or infinity: None instead)."""
        server, now = self.server, self.clock()
        snapshot = server.orch.snapshot()
        return {
            "model": server.config.model_name,
            "uptime_s": _round(now - self.started_at),
            "sessions": _sessions(snapshot.sessions, now),
            "stages": [self._stage(status) for status in snapshot.stages],
            "kv": [self._kv(kv) for kv in _kv_pools(snapshot)],
            "admission": self._admission(),
            "latency": {"ttfp": server.metrics.recent_ttfp.summary(now),
                        "frame": server.metrics.recent_frames.summary(now)},
            "series": self.series.since(since),
        }

    def _stage(self, status: StageStatus) -> dict:
        rates = self.rates.get(status.name, {})
        return {"name": status.name, "requests": status.num_requests, "queue": status.num_ready,
                "batch": status.last_batch_size, "steps_per_s": rates.get("steps_per_s"), "busy": rates.get("busy"),
                "classes": rates.get("classes", {})}

    def _kv(self, kv: dict) -> dict:
        forecast = self.server.kv_watch.forecasts.get(kv["stage"])
        return {**kv, "t_sat_s": _round(forecast.time_to_saturation_s) if forecast else None,
                "fill_rate": _round(forecast.fill_rate, 6) if forecast else None,
                "warning": bool(forecast and forecast.is_warning)}

    def _admission(self) -> dict:
        server, gate = self.server, self.server.gate
        last = gate.last
        return {"policy": server.config.admission.policy, "cap": gate.cap,
                "max_sessions": server.config.server.max_sessions, "sessions": len(server.sessions),
                "streams": server.num_streams, "rejected_sessions": server.num_rejected,
                "admitted_streams": gate.num_admitted, "rejected_streams": gate.num_rejected,
                "p99_ms": _round(1000 * last.p99_s) if last is not None and last.p99_s is not None else None}


def _sessions(sessions: tuple[SessionSnapshot, ...], now: float) -> list[dict]:
    """Newest first; the session with the most recent barge-in has `last_barge_in` true."""
    barged = [s for s in sessions if s.last_barge_in_at is not None]
    latest = max(barged, key=lambda s: s.last_barge_in_at).session_id if barged else None
    return [{"id": s.session_id, "age_s": _round(now - s.opened_at, 1), "state": s.state,
             "buffer_ms": round(s.playback_buffer_ms), "urgency": s.urgency, "context_tokens": s.context_tokens,
             "device_tokens": s.device_tokens, "kv": s.kv_place, "next_use_s": _round(s.next_use_s, 2),
             "barge_in_s": None if s.last_barge_in_at is None else _round(now - s.last_barge_in_at, 1),
             "last_barge_in": s.session_id == latest} for s in sessions]


def _kv_pools(snapshot: PipelineSnapshot) -> list[dict]:
    """Per stage with a KV pool: device occupancy (0-1) and blocks, host tier occupancy and blocks (None: no
    host tier), and reload seconds so far with a ready request waiting (critical) or not (background)."""
    pools = []
    for status in snapshot.stages:
        total = status.kv_blocks_used + status.kv_blocks_free
        if not total:
            continue
        host_total = snapshot.host_blocks.get(status.name)
        host_used = status.kv_counters.get("host_blocks_used", 0)
        pools.append({
            "stage": status.name, "device": _round(status.kv_blocks_used / total, 4),
            "device_blocks": [status.kv_blocks_used, total],
            "host": _round(host_used / host_total, 4) if host_total else None,
            "host_blocks": [int(host_used), host_total] if host_total else None,
            "reload_critical_s": _round(status.kv_counters.get("reload_critical_s")),
            "reload_background_s": _round(status.kv_counters.get("reload_background_s")),
        })
    return pools


def _rates(before: StageStatus, after: StageStatus, interval_s: float) -> dict:
    rounds = after.policy_counters.get("rounds", 0) - before.policy_counters.get("rounds", 0)
    classes = {name: _round((count - before.policy_counters.get(name, 0)) / rounds, 2) if rounds > 0 else 0.0
               for name, count in after.policy_counters.items() if name != "rounds"}
    rates = {"steps_per_s": _round((after.num_steps - before.num_steps) / interval_s, 1),
             "busy": _round((after.busy_s - before.busy_s) / interval_s, 3), "classes": classes}
    if after.kv_counters and before.kv_counters:
        for path in ("critical", "background"):
            spent = after.kv_counters[f"reload_{path}_s"] - before.kv_counters[f"reload_{path}_s"]
            rates[f"reload_{path}_ms_per_s"] = _round(1000 * spent / interval_s, 2)
    return rates


def _round(value: float | None, digits: int = 3) -> float | None:
    return round(value, digits) if value is not None and math.isfinite(value) else None
