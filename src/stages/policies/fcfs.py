"""First come, first served: the throughput-oriented baseline."""

from __future__ import annotations

from collections.abc import Sequence

from stages.policies.base import SchedulingPolicy, register_policy
from stages.requests.base import StageRequest


@register_policy("fcfs")
class FCFSPolicy(SchedulingPolicy):
    """Oldest arrival first."""

    def order(self, requests: Sequence[StageRequest], now: float) -> list[StageRequest]:
        return sorted(requests, key=lambda r: r.arrival_time)
