"""Continuous batching for one stage: budgets, chunked prefill, preemption; KV through the residency manager."""

from __future__ import annotations

from collections.abc import Callable

from kvtier import KVCacheManager
from stages.config import SchedulerConfig
from stages.interaction import InteractionView
from stages.kv_residency import KVResidency
from stages.no_kv_residency import NoKVResidency
from stages.plan import RunnerOutput, ScheduledChunk, SchedulerPlan, StageOutput
from stages.policies import make_policy
from stages.requests.base import RequestStatus, StageRequest
from stages.residency import Residency
from stages.shared_device import SharedDevice


class Scheduler:
    """Decides each round which positions of which requests run.

    A round stamps `ready_since` on requests that just got pending work, asks the
    policy which ready requests to serve and in what order (it may hold some or all
    back, e.g. for another stage on its `device` whose listener waits),
    and walks that order giving each as many pending positions as the token budget
    allows (long prefills are chunked) until `max_num_batched_tokens` or
    `max_num_seqs` is reached; the order alone decides whether admitted (RUNNING)
    requests go before WAITING ones. KV is reserved before a chunk is planned (ask,
    then commit). When the pool runs dry, residents with no pending work are
    preempted first, least recently scheduled first; a running request may also
    preempt a running request not planned this round, held ones first, then from the
    end of the order; a waiting request may preempt idle residents only. Preemption
    frees the KV and sends the request back to WAITING for recomputation. A request
    that could never fit the pool fails.

    Everything else with KV is the `residency` manager's (Residency: KVResidency, or
    NoKVResidency for a stage without KV): with a host tier, dormant residents are
    written back and, before anything is preempted, their device blocks are evicted
    by the tier's policy; so are those of requests the policy holds for a while (its
    `resume_at`). A RUNNING request whose KV is away waits for it to load; while
    transfers are in flight a shortfall waits for them rather than preempting. With
    a window (its DropStrategy), every committed chunk frees the request's blocks that
    no later query reads, so a request holds about sinks + window + one chunk of KV
    however long it runs; it fails only if that much can never fit the pool.

    `residency` defaults to a KVResidency over `kv` that neither preloads nor protects
    (NoKVResidency without `kv`).
    """

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager | None, clock: Callable[[], float],
                 view: InteractionView | None = None, residency: Residency | None = None,
                 device: SharedDevice | None = None) -> None:
        self.config = config
        self.kv = kv
        self.clock = clock
        self.policy = make_policy(config, view, kv, device)
        self.residency = residency or (NoKVResidency() if kv is None else KVResidency(kv, view))
        self.requests: dict[str, StageRequest] = {}
        self._outputs: list[StageOutput] = []
        self._growth = 0  # admitted requests still to plan in this round
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

    def truncate(self, request_id: str, num_tokens: int) -> None:
        """Keep the first `num_tokens` positions of a request and of its KV.

        ValueError, nothing changed, if a window already freed KV that the next position attends to.
        """
        self.residency.truncate(self.requests[request_id], num_tokens)

    def resident_tokens(self) -> dict[str, int]:
        """Per request, the positions whose KV is on the device."""
        return self.residency.resident_tokens(self.requests)

    def fail(self, request: StageRequest, message: str) -> None:
        self._remove(request)
        request.finish_reason = "error"
        self._outputs.append(StageOutput(request.request_id, is_finished=True, error=message))

    @property
    def num_ready(self) -> int:
        return sum(r.num_pending > 0 for r in self.requests.values())

    @property
    def is_waiting_on_kv(self) -> bool:
        """True while KV transfers are in flight (a ready request may be waiting for one)."""
        return self.residency.is_waiting_on_kv

    def speech_started(self, request_id: str, lead_s: float) -> None:
        if request_id in self.requests:
            self.residency.speech_started(request_id, lead_s, self.clock())

    def speech_paused(self, request_id: str, lead_s: float) -> None:
        if request_id in self.requests:
            self.residency.speech_paused(request_id, lead_s, self.clock())

    def schedule(self) -> SchedulerPlan:
        now = self.clock()
        plan = SchedulerPlan(now)
        self.residency.poll(now)
        ready, dormant = self._scan(now, plan.ready)
        self.residency.sweep(dormant, now)
        ordered = self.policy.order(ready, now)
        self.residency.follow_holds(self.policy.resume_at, self.requests, now)
        if not ordered:
            return plan
        budget = self.config.max_num_batched_tokens
        running = RequestStatus.RUNNING
        self._growth = sum(r.status is running for r in ordered)
        for request in ordered:
            if budget == 0 or len(plan.chunks) >= self.config.max_num_seqs:
                break
            self._growth -= request.status is running
            chunk = self._plan_chunk(request, budget, ordered, plan)
            if chunk is not None:
                plan.chunks.append(chunk)
                budget -= chunk.num_tokens
                request.status = RequestStatus.RUNNING
                request.last_scheduled_time = now
        return plan

    def _scan(self, now: float, newly_ready: list[str]) -> tuple[list[StageRequest], list[StageRequest]]:
        """Reap finished requests; those with pending work (any that just got some is ready since `now`
        and listed in `newly_ready`), and the admitted dormant ones."""
        ready, dormant, finished = [], [], []
        for request in self.requests.values():
            if request.is_finished:
                finished.append(request)
            elif request.num_pending > 0:
                if request.ready_since is None:
                    request.ready_since = now
                    newly_ready.append(request.request_id)
                    self.residency.woke(request)
                ready.append(request)
            else:
                request.ready_since = None
                if request.is_dormant and request.status is RequestStatus.RUNNING:
                    dormant.append(request)
        self._reap(finished)
        return ready, dormant

    def _plan_chunk(
        self, request: StageRequest, budget: int, ordered: list[StageRequest], plan: SchedulerPlan
    ) -> ScheduledChunk | None:
        num_tokens = request.num_schedulable(budget)
        if num_tokens <= 0 or request.status is RequestStatus.FINISHED:
            return None
        end = request.num_computed + num_tokens
        problem = self.residency.never_fits(request, end)
        if problem is not None:
            self.fail(request, problem)
            return None
        if request.status is RequestStatus.RUNNING and not self._resident(request, plan):
            return None
        if not self._reserve(request, end, ordered, plan):
            return None
        return ScheduledChunk(request, request.num_computed, num_tokens)

    def _resident(self, request: StageRequest, plan: SchedulerPlan) -> bool:
        """True when the request's KV is all on the device; else it waits for a load or,
        with no room to load and nothing in flight, recomputes (preempted)."""
        resident = self.residency.ensure_resident(request, self.clock())
        if resident is None and not self.residency.is_waiting_on_kv:
            self._preempt(request, plan)
        return bool(resident)

    def _reserve(self, request: StageRequest, end: int, ordered: list[StageRequest], plan: SchedulerPlan) -> bool:
        """Reserve KV for the chunk, evicting or preempting as the class docstring says.

        A WAITING request also leaves one block of growth for every admitted request
        still to plan this round (it may evict dormant KV for them, never preempt):
        otherwise a new request ordered first takes the blocks running ones were about
        to decode into, and they preempt each other.
        """
        growth = self._growth if request.status is RequestStatus.WAITING else 0
        shortfall = self.residency.shortfall(request, end, growth, self.clock())
        if shortfall is None:
            return False
        if shortfall > 0:
            victims = self._victims(request, ordered, plan, shortfall)
            if victims is None:
                return False
            for victim in victims:
                self._preempt(victim, plan)
        self.residency.reserve(request.request_id, end)
        return True

    def _victims(
        self, request: StageRequest, ordered: list[StageRequest], plan: SchedulerPlan, shortfall: int
    ) -> list[StageRequest] | None:
        """The fewest victims, in preemption order, that free `shortfall` blocks; None if none do."""
        held = self.residency.blocks_held
        planned = {c.request.request_id for c in plan.chunks} | {request.request_id}
        holders = [r for r in self.requests.values()
                   if r.status is RequestStatus.RUNNING and r.request_id not in planned and held(r.request_id)]
        candidates = sorted((r for r in holders if r.num_pending == 0), key=lambda r: r.last_scheduled_time)
        if request.status is RequestStatus.RUNNING:  # then active ones: held first, then from the end of the order
            rank = {r.request_id: i for i, r in enumerate(ordered)}
            active = [r for r in holders if r.num_pending > 0]
            candidates += sorted(active, key=lambda r: rank.get(r.request_id, len(rank)), reverse=True)
        victims, freed = [], 0
        for victim in candidates:
            if freed >= shortfall:
                break
            victims.append(victim)
            freed += held(victim.request_id)
        return victims if freed >= shortfall else None

    def _preempt(self, victim: StageRequest, plan: SchedulerPlan) -> None:
        self.residency.free(victim.request_id)
        victim.reset_computed()
        victim.status = RequestStatus.WAITING
        plan.preempted.append(victim.request_id)
        self.num_preemptions += 1

    def _remove(self, request: StageRequest) -> None:
        del self.requests[request.request_id]
        self.residency.free(request.request_id)
        request.status = RequestStatus.FINISHED

    def _reap(self, finished: list[StageRequest]) -> None:
        for request in finished:
            self._remove(request)
            self._outputs.append(StageOutput(request.request_id, is_finished=True))

    def update_from_output(self, plan: SchedulerPlan, output: RunnerOutput) -> list[StageOutput]:
        """Commit each chunk's result; emit payloads and finished requests.

        Only a committed chunk can finish a request here: commands that end one are
        applied between steps, and the next `schedule` reaps what they finished.
        """
        finished, now = [], self.clock()
        for chunk in plan.chunks:
            request = chunk.request
            if request.request_id not in self.requests:
                continue
            payload = request.advance(chunk.num_tokens, output.results.get(request.request_id))
            if request.num_pending == 0:
                request.ready_since = None
            self.residency.committed(request, now)
            if payload is not None:
                self._outputs.append(StageOutput(request.request_id, payload))
            if request.is_finished:
                finished.append(request)
        self._reap(finished)
        outputs, self._outputs = self._outputs, []
        return outputs

    def check_integrity(self) -> None:
        self.residency.check_integrity(self.requests.values())
