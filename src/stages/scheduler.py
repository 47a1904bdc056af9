"""Continuous batching for one stage: budgets, chunked prefill, preemption."""

from __future__ import annotations

from collections.abc import Callable

from kvtier import KVCacheManager
from stages.config import SchedulerConfig
from stages.plan import RunnerOutput, ScheduledChunk, SchedulerPlan, StageOutput
from stages.policies import make_policy
from stages.requests.base import RequestStatus, StageRequest


class Scheduler:
    """Decides each round which positions of which requests run.

    A round walks the admitted (RUNNING) requests that have pending work in policy
    order, then the WAITING ones, giving each as many pending positions as the token
    budget allows (long prefills are chunked) until `max_num_batched_tokens` or
    `max_num_seqs` is reached. KV is reserved before a chunk is planned (ask, then
    commit). When the pool runs dry, residents with no pending work are preempted
    first, least recently scheduled first; a running request may also preempt the
    least urgent running request not planned this round; a waiting request may
    preempt idle residents only. Preemption frees the KV and sends the request back
    to WAITING for recomputation. A request that could never fit the pool fails.
    """

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager | None, clock: Callable[[], float]) -> None:
        self.config = config
        self.kv = kv
        self.clock = clock
        self.policy = make_policy(config.policy)
        self.requests: dict[str, StageRequest] = {}
        self._outputs: list[StageOutput] = []
        self.num_preemptions = 0

    def add(self, request: StageRequest) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request {request.request_id!r} already exists")
        self.requests[request.request_id] = request

    def abort(self, request_id: str) -> bool:
        """Drop a request and free its KV at once; nothing more is emitted for it."""
        request = self.requests.get(request_id)
        if request is not None:
            self._remove(request)
        return request is not None

    def fail(self, request: StageRequest, message: str) -> None:
        self._remove(request)
        request.finish_reason = "error"
        self._outputs.append(StageOutput(request.request_id, is_finished=True, error=message))

    @property
    def num_ready(self) -> int:
        return sum(r.num_pending > 0 for r in self.requests.values())

    def schedule(self) -> SchedulerPlan:
        self._reap_finished()
        now = self.clock()
        ready = [r for r in self.requests.values() if r.num_pending > 0]
        ordered = self.policy.order(ready, now)
        plan = SchedulerPlan()
        budget = self.config.max_num_batched_tokens
        for request in [r for r in ordered if r.status is RequestStatus.RUNNING] + [
            r for r in ordered if r.status is RequestStatus.WAITING
        ]:
            if budget == 0 or len(plan.chunks) >= self.config.max_num_seqs:
                break
            chunk = self._plan_chunk(request, budget, ordered, plan)
            if chunk is not None:
                plan.chunks.append(chunk)
                budget -= chunk.num_tokens
                request.status = RequestStatus.RUNNING
                request.last_scheduled_time = now
        return plan

    def _plan_chunk(
        self, request: StageRequest, budget: int, ordered: list[StageRequest], plan: SchedulerPlan
    ) -> ScheduledChunk | None:
        num_tokens = request.num_schedulable(budget)
        if num_tokens <= 0 or request.status is RequestStatus.FINISHED:
            return None
        if self.kv is not None:
            if not self.kv.fits_at_all(request.num_known):
                capacity = self.kv.pool.num_blocks * self.kv.block_size
                self.fail(request, f"needs {request.num_known} tokens of KV; the pool holds {capacity}")
                return None
            if not self._reserve(request, request.num_computed + num_tokens, ordered, plan):
                return None
        return ScheduledChunk(request, request.num_computed, num_tokens)

    def _reserve(self, request: StageRequest, num_tokens: int, ordered: list[StageRequest], plan: SchedulerPlan) -> bool:
        assert self.kv is not None
        shortfall = self.kv.num_new_blocks(request.request_id, num_tokens) - self.kv.num_free_blocks
        if shortfall > 0:
            victims = self._victims(request, ordered, plan, shortfall)
            if victims is None:
                return False
            for victim in victims:
                self._preempt(victim, plan)
        self.kv.reserve(request.request_id, num_tokens)
        return True

    def _victims(
        self, request: StageRequest, ordered: list[StageRequest], plan: SchedulerPlan, shortfall: int
    ) -> list[StageRequest] | None:
        """The fewest victims, in preemption order, that free `shortfall` blocks; None if none do."""
        planned = {c.request.request_id for c in plan.chunks} | {request.request_id}
        holders = {
            r.request_id: r for r in self.requests.values()
            if r.status is RequestStatus.RUNNING and r.request_id not in planned and self.kv.num_blocks_held(r.request_id)
        }
        candidates = sorted((r for r in holders.values() if r.num_pending == 0), key=lambda r: r.last_scheduled_time)
        if request.status is RequestStatus.RUNNING:
            candidates += [r for r in reversed(ordered) if r.request_id in holders and r.num_pending > 0]
        victims, freed = [], 0
        for victim in candidates:
            if freed >= shortfall:
                break
            victims.append(victim)
            freed += self.kv.num_blocks_held(victim.request_id)
        return victims if freed >= shortfall else None

    def _preempt(self, victim: StageRequest, plan: SchedulerPlan) -> None:
        if self.kv is not None:
            self.kv.free(victim.request_id)
        victim.reset_computed()
        victim.status = RequestStatus.WAITING
        plan.preempted.append(victim.request_id)
        self.num_preemptions += 1

    def _remove(self, request: StageRequest) -> None:
        del self.requests[request.request_id]
        if self.kv is not None:
            self.kv.free(request.request_id)
        request.status = RequestStatus.FINISHED

    def _reap_finished(self) -> None:
        for request in [r for r in self.requests.values() if r.is_finished]:
            self._remove(request)
            self._outputs.append(StageOutput(request.request_id, is_finished=True))

    def update_from_output(self, plan: SchedulerPlan, output: RunnerOutput) -> list[StageOutput]:
        """Commit each chunk's result; emit payloads and finished requests."""
        for chunk in plan.chunks:
            request = chunk.request
            if request.request_id not in self.requests:
                continue
            payload = request.advance(chunk.num_tokens, output.results.get(request.request_id))
            if payload is not None:
                self._outputs.append(StageOutput(request.request_id, payload))
        self._reap_finished()
        outputs, self._outputs = self._outputs, []
        return outputs

    def check_integrity(self) -> None:
        if self.kv is None:
            return
        self.kv.check_integrity()
        for request in self.requests.values():
            held = self.kv.num_blocks_held(request.request_id)
            assert request.num_computed >= 0, f"{request.request_id}: negative num_computed"
            if request.status is RequestStatus.WAITING:
                assert held == 0 and request.num_computed == 0, f"{request.request_id} waits but holds KV"
            else:
                assert request.num_computed <= self.kv.table(request.request_id).num_tokens, request.request_id
