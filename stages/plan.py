"""What passes between scheduler, runner and engine in one step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stages.requests.base import StageRequest


@dataclass(frozen=True)
class ScheduledChunk:
    """Positions [start, start + num_tokens) of `request` computed this step."""

    request: StageRequest
    start: int
    num_tokens: int

    @property
    def end(self) -> int:
        return self.start + self.num_tokens


@dataclass(frozen=True)
class SchedulerPlan:
    """One round at clock time `now`: the chunks to run, the requests preempted to make room, and
    the requests that got work since the last round (`ready`)."""

    now: float = 0.0
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    ready: list[str] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks


@dataclass(frozen=True)
class RunnerOutput:
    """Per request id, the runner's result for its chunk (None: nothing sampled)."""

    results: dict[str, Any]


@dataclass(frozen=True)
class StageOutput:
    """What a stage emits for a request after a step: a payload, an end, or an error."""

    request_id: str
    payload: Any = None
    is_finished: bool = False
    error: str | None = None
