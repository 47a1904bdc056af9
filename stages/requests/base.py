"""What a stage schedules: a request that exposes positions to compute."""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any


class RequestStatus(enum.Enum):
    WAITING = "waiting"    # not admitted (new or preempted): holds no KV
    RUNNING = "running"    # admitted: holds KV, scheduled whenever it has pending work
    FINISHED = "finished"  # done or aborted: freed and forgotten


class StageRequest(ABC):
    """One unit of work at one stage; its inputs may keep arriving (streaming).

    Contract with the scheduler:
    - positions [0, num_computed) are done (their KV is written, for KV stages);
    - `num_pending` positions after those can be computed now; 0 means blocked on
      input (or idle between turns) and never scheduled;
    - `num_schedulable(budget)` is how many of them fit a round with `budget` tokens
      left (whole chunks for stages that work in chunks);
    - `advance(n, result)` commits n computed positions and the runner's result for
      them, and returns the payload to emit downstream (or None);
    - `reset_computed()` forgets computed work after preemption; inputs and sampled
      outputs are kept, so recomputation reproduces them. A request preempted while
      dormant recomputes only once input arrives past the `num_known` it had then
      (`idle_until_known`; -1: no such wait): nothing needs its KV before its next
      turn, and recomputing it at once would take room from those that do;
    - `forget(start, stop)` (after a chunk, from the stage's DropStrategy) says that no
      step, recomputation included, reads the inputs of positions [start, stop) again:
      the request may let go of them (the default keeps everything). Those it let go
      of are `forgotten` and are never computed again: they count neither as pending
      nor in a chunk, and a computation that reaches their start resumes at their end
      (recomputation too, which then starts past them if they start at 0);
    - `is_finished` becomes true when nothing more can ever arrive or be computed;
    - `is_dormant` is true while the request waits for a whole new unit of work
      (a session's context between turns), not for the rest of one in progress:
      only a dormant request's KV may move to a slower tier.
    - `is_speculative` is true while its pending work is a guess no one waits for yet
      (a partial transcript while the user still speaks): a policy that serves
      waiting listeners first may serve it after everything else.
    - `speech_paused()` tells it its user went quiet and their turn may be over: a
      request whose work the end of the turn waits for may start it now (the ASR's pass
      over the speech so far); the others ignore it.
    - `audio_ms` is the reply audio its outputs carried so far (0 at a stage whose
      outputs are not audio), for a policy to count what playback telemetry does not yet.
    The scheduler owns `status`, `last_scheduled_time`, `ready_since` (the clock
    time of the round that last saw the request go from no pending work to some; None
    while it has none) and `num_preemptions` (how often its KV was taken). Only the
    stage engine's thread touches a request once it is submitted.
    """

    def __init__(self, request_id: str, arrival_time: float) -> None:
        self.request_id = request_id
        self.arrival_time = arrival_time
        self.status = RequestStatus.WAITING
        self.num_computed = 0
        self.last_scheduled_time = arrival_time
        self.ready_since: float | None = None
        self.num_preemptions = 0
        self.finish_reason: str | None = None
        self.idle_until_known = -1
        self.audio_ms = 0.0

    @property
    @abstractmethod
    def num_known(self) -> int:
        """Positions whose inputs are known (computed or pending)."""

    @property
    def num_pending(self) -> int:
        if self.num_known <= self.idle_until_known:
            return 0
        gap = self.forgotten
        return self.num_known - self.num_computed - (len(gap) if self.num_computed < gap.start else 0)

    def num_schedulable(self, budget: int) -> int:
        gap = self.forgotten
        if self.num_computed < gap.start:
            budget = min(budget, gap.start - self.num_computed)
        return min(self.num_pending, budget)

    @property
    def forgotten(self) -> range:
        """Positions whose inputs the request let go of (empty: it keeps all it was given)."""
        return range(0)

    def forget(self, start: int, stop: int) -> None:
        """No step will read the inputs of positions [start, stop) again (see the contract)."""

    def _skip_forgotten(self) -> None:
        """Computation that reached the forgotten positions resumes after them."""
        gap = self.forgotten
        if gap and self.num_computed == gap.start:
            self.num_computed = gap.stop

    @abstractmethod
    def advance(self, num_tokens: int, result: Any) -> Any:
        """Commit `num_tokens` computed positions; return what to emit, or None."""

    @abstractmethod
    def append(self, data: Any, close: bool = False) -> None:
        """Accept more input; `close` says no more will come."""

    @property
    def is_dormant(self) -> bool:
        return False

    @property
    def is_speculative(self) -> bool:
        return False

    @property
    def is_decoding(self) -> bool:
        """Admitted, with one position to compute next: a reply decoding."""
        return self.status is RequestStatus.RUNNING and self.num_pending == 1

    def speech_paused(self) -> None:
        pass

    def reset_computed(self) -> None:
        self.idle_until_known = self.num_known if self.is_dormant else -1
        self.num_computed = 0
        self._skip_forgotten()

    def stop_generation(self) -> None:
        raise ValueError(f"{type(self).__name__} does not generate; nothing to stop")

    def truncate(self, num_tokens: int) -> None:
        raise ValueError(f"{type(self).__name__} cannot be truncated")

    @property
    @abstractmethod
    def is_finished(self) -> bool:
        """True when the request will never have pending work again."""
