"""What one vLLM step serves, in what order: LiveServe's scheduling policy asked about vLLM's queues. Pure
Python; the scheduler in vllm_api hands it vLLM's requests, each described by LiveServe's request id."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from stages.policies.base import SchedulingPolicy
from stages.requests.base import RequestStatus

V = TypeVar("V")  # a vLLM request


@dataclass(slots=True)
class QueuedRequest(Generic[V]):
    """One vLLM request as a SchedulingPolicy reads it (Orderable): keyed by LiveServe's request id (vLLM's
    own carries a random suffix), ready since it arrived (a generation is ready at once), `num_pending` the
    positions it has yet to compute, never speculative (a thinker's generation), RUNNING while vLLM holds
    its KV, no audio out."""

    request_id: str
    arrival_time: float
    num_pending: int
    status: RequestStatus
    entry: V

    @property
    def ready_since(self) -> float:
        return self.arrival_time

    @property
    def is_speculative(self) -> bool:
        return False

    @property
    def audio_ms(self) -> float:
        return 0.0


@dataclass(frozen=True)
class StepOrder(Generic[V]):
    """vLLM's queues for one step. `running` and `waiting` are most urgent first (vLLM serves running ones
    first, in order, and preempts from the end of `running`); `held_running` and `held_waiting` sit the step
    out (held, or yielding to a waiting listener), each in the order it was given."""

    running: list[V]
    waiting: list[V]
    held_running: list[V]
    held_waiting: list[V]


def order_step(policy: SchedulingPolicy, running: Sequence[V], waiting: Sequence[V],
               describe: Callable[[V], tuple[str, float, int]], now: float) -> StepOrder[V]:
    """Ask `policy` to order vLLM's `running` and `waiting` requests, `describe` giving each one's LiveServe
    request id, arrival time and positions yet to compute."""
    queued = [QueuedRequest(*describe(entry), RequestStatus.RUNNING, entry) for entry in running]
    queued += [QueuedRequest(*describe(entry), RequestStatus.WAITING, entry) for entry in waiting]
    ordered = policy.order(queued, now)
    served = {id(q) for q in ordered}
    return StepOrder(
        running=[q.entry for q in ordered if q.status is RequestStatus.RUNNING],
        waiting=[q.entry for q in ordered if q.status is RequestStatus.WAITING],
        held_running=[q.entry for q in queued[:len(running)] if id(q) not in served],
        held_waiting=[q.entry for q in queued[len(running):] if id(q) not in served],
    )
