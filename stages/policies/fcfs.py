"""First come, first served: the throughput-oriented baseline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from stages.policies.base import R, SchedulingPolicy
from stages.requests.base import RequestStatus


@dataclass(frozen=True)
class FCFSParams:
    """fcfs takes no parameters."""


class FCFSPolicy(SchedulingPolicy):
    """Admitted requests first, then waiting ones; each group oldest arrival first. Holds nothing.

    Serving admitted requests first keeps a preempted or new request from taking the
    free blocks that running ones are about to grow into (preemption churn).
    """

    def order(self, requests: Sequence[R], now: float) -> list[R]:
        return sorted(requests, key=lambda r: (r.status is RequestStatus.WAITING, r.arrival_time))
