"""Periodic samples of the stages' KV pools: one saturation forecast per pool, resident tokens per session."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from liveserve.admission.forecast import SaturationForecast
from orchestrator.datapath.request_id import RequestId


class PoolStatus(Protocol):
    """What KVWatch reads of a stage's status (stages.engine.StageStatus has it)."""

    name: str
    kv_blocks_used: int
    kv_blocks_free: int
    resident_tokens: dict[RequestId, int]  # request id -> tokens whose KV is on the device


class KVWatch:
    """Feeds one SaturationForecast per stage with a KV pool, and counts the resident
    tokens of `session_stage` per session (sessions whose requests ended drop out)."""

    def __init__(self, window_s: float, expected_session_s: float, session_stage: str = "thinker") -> None:
        self.window_s, self.expected_session_s, self.session_stage = window_s, expected_session_s, session_stage
        self.forecasts: dict[str, SaturationForecast] = {}
        self.resident_tokens: dict[str, int] = {}

    def sample(self, statuses: Iterable[PoolStatus], num_sessions: int, now: float) -> None:
        for status in statuses:
            total = status.kv_blocks_used + status.kv_blocks_free
            if total == 0:
                continue
            forecast = self.forecasts.get(status.name)
            if forecast is None:
                forecast = self.forecasts[status.name] = SaturationForecast(status.name, self.window_s,
                                                                            self.expected_session_s)
            forecast.add(now, status.kv_blocks_used / total, num_sessions)
            if status.name == self.session_stage:
                self.resident_tokens = _per_session(status.resident_tokens)


def _per_session(resident_tokens: dict[str, int]) -> dict[str, int]:
    sessions: dict[str, int] = {}
    for request_id, tokens in resident_tokens.items():
        sessions[request_id.session] = sessions.get(request_id.session, 0) + tokens
    return sessions
