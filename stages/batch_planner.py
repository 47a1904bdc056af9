"""One round's batch: the policy's order walked within the budgets, in chunks, each with its KV."""

from __future__ import annotations

from collections.abc import Callable

from stages.config import SchedulerConfig
from stages.plan import ScheduledChunk, SchedulerPlan
from stages.preemptor import Preemptor
from stages.requests.base import RequestStatus, StageRequest
from stages.residency import Residency


class BatchPlanner:
    """Plans the chunks of one round from the policy's order.

    It walks the order giving each request as many pending positions as the token
    budget left allows (a long prefill is chunked across rounds) until
    `max_num_batched_tokens` or `max_num_seqs` is reached; a planned request is
    admitted (RUNNING) and stamped `last_scheduled_time`. Before a chunk is planned
    its KV is reserved (ask, then commit): a request that could never fit fails (via
    `fail`); an admitted request whose KV is away waits for it to load, and for room
    to load it, which it may take from idle residents (never active ones: they
    recompute, a dormant one only at its next turn, while KV on the host would not);
    a chunk the residency manager cannot make room for preempts the
    Preemptor's victims, or waits.
    A WAITING request leaves room for the growth of every admitted request still to
    plan this round, the block its next position starts where it starts one (it may
    evict dormant KV for them, never preempt): otherwise a new request ordered first
    takes the blocks running ones were about to decode into, and they preempt each
    other. Only those blocks for a new turn: a reserve for every running request would
    keep a new turn ordered first out of a small pool while its blocks stood free. A
    preempted request (a recomputation) leaves a block for every admitted request in the
    order: admitted into the blocks the running ones are about to grow into, it was the
    next victim, recomputed again and again (a thrash of recomputations:
    benchmarks/log/2026-11-30-grid-noise-floor.md).
    With `decode_reserve` a prefill chunk leaves a token of the budget for every admitted
    request decoding after it in the order (within `max_num_seqs`): a first-audio prefill
    ordered first takes what is left once the replies playing have their next position, so
    that a long prompt never stalls every reply for a round (FCFS's order, which puts replies
    before later turns, has no such stall). With a `prefill_cap` the round's chunks of more than
    one position take at most that many positions in all; single positions are not capped.
    """

    def __init__(self, config: SchedulerConfig, residency: Residency, preemptor: Preemptor,
                 clock: Callable[[], float], fail: Callable[[StageRequest, str], None],
                 decode_reserve: bool = False) -> None:
        self.config = config
        self.decode_reserve = decode_reserve
        self.residency = residency
        self.preemptor = preemptor
        self.clock = clock
        self.fail = fail
        self._growth = 0  # blocks the admitted requests still to plan in this round grow into
        self._admitted = 0  # admitted requests in the order: a recomputation leaves a block for each

    def plan(self, ordered: list[StageRequest], plan: SchedulerPlan, prefill_cap: int | None = None) -> None:
        """Append to `plan` the chunks of this round, and the requests preempted for them."""
        budget = self.config.max_num_batched_tokens
        prefill_left = budget if prefill_cap is None else prefill_cap
        running = RequestStatus.RUNNING
        grows = {r.request_id: self.residency.blocks_to_grow(r) for r in ordered if r.status is running}
        self._growth, self._admitted = sum(grows.values()), len(grows)
        decoders_left = sum(r.is_decoding for r in ordered) if self.decode_reserve else 0
        for request in ordered:
            if budget == 0 or len(plan.chunks) >= self.config.max_num_seqs:
                break
            self._growth -= grows.get(request.request_id, 0)
            reserve = 0
            if decoders_left and request.is_decoding:
                decoders_left -= 1
            elif decoders_left:
                reserve = min(decoders_left, self.config.max_num_seqs - len(plan.chunks) - 1)
            limit = budget - reserve if request.num_pending == 1 else min(budget - reserve, prefill_left)
            chunk = self._plan_chunk(request, limit, ordered, plan) if limit > 0 else None
            if chunk is not None:
                plan.chunks.append(chunk)
                budget -= chunk.num_tokens
                prefill_left -= chunk.num_tokens if chunk.num_tokens > 1 else 0
                request.status = running
                request.last_scheduled_time = plan.now

    def _plan_chunk(self, request: StageRequest, budget: int, ordered: list[StageRequest],
                    plan: SchedulerPlan) -> ScheduledChunk | None:
        num_tokens = request.num_schedulable(budget)
        if num_tokens <= 0 or request.status is RequestStatus.FINISHED:
            return None
        end = request.num_computed + num_tokens
        problem = self.residency.never_fits(request, end)
        if problem is not None:
            self.fail(request, problem)
            return None
        if request.status is RequestStatus.RUNNING and not self._make_resident(request, ordered, plan):
            return None
        if not self._reserve(request, end, ordered, plan):
            return None
        return ScheduledChunk(request, request.num_computed, num_tokens)

    def _make_resident(self, request: StageRequest, ordered: list[StageRequest], plan: SchedulerPlan) -> bool:
        missing = self.residency.ensure_resident(request, self.clock())
        if not missing:
            return missing == 0
        victims = self.preemptor.victims(request, ordered, plan, missing, idle_only=True)
        if victims is None:
            return False
        for victim in victims:
            self.preemptor.preempt(victim, plan)
        return self.residency.ensure_resident(request, self.clock()) == 0

    def _reserve(self, request: StageRequest, end: int, ordered: list[StageRequest], plan: SchedulerPlan) -> bool:
        growth = 0
        if request.status is RequestStatus.WAITING:
            growth = self._admitted if request.num_preemptions else self._growth
        shortfall = self.residency.shortfall(request, end, growth, self.clock())
        if shortfall is None:
            return False
        if shortfall > 0:
            victims = self.preemptor.victims(request, ordered, plan, shortfall)
            if victims is None:
                return False
            for victim in victims:
                self.preemptor.preempt(victim, plan)
        self.residency.reserve(request, end)
        return True

