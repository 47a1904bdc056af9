"""Continuous batching for one stage: budgets, chunked prefill, preemption."""

from __future__ import annotations

from collections.abc import Callable

from kvtier import KVCacheManager
from stages.config import SchedulerConfig, WindowSpec
from stages.interaction import InteractionView
from stages.kv_residency import KVResidency
from stages.plan import RunnerOutput, ScheduledChunk, SchedulerPlan, StageOutput
from stages.policies import make_policy
from stages.requests.base import RequestStatus, StageRequest
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

    With a host KV tier (see KVResidency), dormant residents are written back and,
    before anything is preempted, their device blocks are evicted by the tier's
    policy; so are those of requests the policy holds for a while (its `resume_at`),
    next used when it expects to resume them. A RUNNING request whose KV is away
    waits for it to load. While transfers are in flight, a shortfall waits for them
    rather than preempting.

    With a `window` (no host tier), every committed chunk frees the request's blocks
    that no later query reads (between its sink blocks and the block where the next
    position's window starts), so a request holds about sinks + window + one chunk of
    KV however long it runs; it fails only if that much can never fit the pool.
    """

    def __init__(self, config: SchedulerConfig, kv: KVCacheManager | None, clock: Callable[[], float],
                 view: InteractionView | None = None, residency: KVResidency | None = None,
                 window: WindowSpec | None = None, device: SharedDevice | None = None) -> None:
        self.config = config
        self.kv = kv
        self.window = window
        self.clock = clock
        self.policy = make_policy(config, view, kv, device)
        self.residency = residency or (KVResidency(kv, view, preload=False, protect_speaking=False) if kv else None)
        self.requests: dict[str, StageRequest] = {}
        self._outputs: list[StageOutput] = []
        self._dormant: list[StageRequest] = []
        self._held: dict[str, float] = {}  # the policy's last `resume_at`
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
        request = self.requests[request_id]
        if self.window is not None and self.kv is not None:
            dropped = self.kv.dropped(request_id)
            if dropped and dropped.start < num_tokens < dropped.stop + self.window.tokens:
                raise ValueError(f"cannot keep {num_tokens} positions of {request_id!r}: the window freed the KV of "
                                 f"positions {dropped.start}-{dropped.stop - 1}")
        request.truncate(num_tokens)
        if self.kv is not None:
            self.kv.truncate(request_id, num_tokens)

    def resident_tokens(self) -> dict[str, int]:
        """Per request, the positions whose KV is on the device."""
        kv = self.kv
        return {rid: kv.num_resident_tokens(rid) for rid in self.requests} if kv is not None else {}

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
        return self.kv is not None and self.kv.tier.has_transfers_in_flight

    def speech_started(self, request_id: str, lead_s: float) -> None:
        if self.residency is not None and request_id in self.requests:
            self.residency.speech_started(request_id, lead_s, self.clock())

    def speech_paused(self, request_id: str, lead_s: float) -> None:
        if self.residency is not None and request_id in self.requests:
            self.residency.speech_paused(request_id, lead_s, self.clock())

    def schedule(self) -> SchedulerPlan:
        now = self.clock()
        plan = SchedulerPlan(now)
        if self.residency is not None:
            self.residency.poll(now)
        ready = self._scan(now, plan.ready)
        if self.residency is not None:
            self.residency.sweep(self._dormant, now)
        ordered = self.policy.order(ready, now)
        if self.residency is not None:
            self._follow_holds(now)
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

    def _scan(self, now: float, newly_ready: list[str]) -> list[StageRequest]:
        """Reap finished requests and return those with pending work; any that just got some is ready
        since `now` (and listed in `newly_ready`)."""
        ready, finished, self._dormant = [], [], []
        for request in self.requests.values():
            if request.is_finished:
                finished.append(request)
            elif request.num_pending > 0:
                if request.ready_since is None:
                    request.ready_since = now
                    newly_ready.append(request.request_id)
                    if self.residency is not None:
                        self.residency.woke(request)
                ready.append(request)
            else:
                request.ready_since = None
                if request.is_dormant and request.status is RequestStatus.RUNNING:
                    self._dormant.append(request)
        self._reap(finished)
        return ready

    def _follow_holds(self, now: float) -> None:
        """KV of requests the policy holds may leave until they resume; a released one is in use again
        (unless it has gone dormant meanwhile)."""
        resume_at = self.policy.resume_at
        for request_id in self._held.keys() - resume_at.keys():
            request = self.requests.get(request_id)
            if request is not None and not request.is_dormant:
                self.residency.woke(request)
        self.residency.held(resume_at, self._held, now)
        self._held = resume_at

    def _plan_chunk(
        self, request: StageRequest, budget: int, ordered: list[StageRequest], plan: SchedulerPlan
    ) -> ScheduledChunk | None:
        num_tokens = request.num_schedulable(budget)
        if num_tokens <= 0 or request.status is RequestStatus.FINISHED:
            return None
        if self.kv is not None:
            if not self._fits_at_all(request, num_tokens):
                return None
            if request.status is RequestStatus.RUNNING and not self._resident(request, plan):
                return None
            if not self._reserve(request, request.num_computed + num_tokens, ordered, plan):
                return None
        return ScheduledChunk(request, request.num_computed, num_tokens)

    def _fits_at_all(self, request: StageRequest, num_tokens: int) -> bool:
        """False (and the request failed) if its KV could never fit the pool: all of it, or with a
        window what it holds while this chunk runs."""
        kv, rid, capacity = self.kv, request.request_id, self.kv.pool.num_blocks
        if self.window is None:
            if kv.fits_at_all(request.num_known):
                return True
            self.fail(request, f"needs {request.num_known} tokens of KV; the pool holds {capacity * kv.block_size}")
            return False
        need = kv.num_blocks_held(rid) + kv.num_new_blocks(rid, request.num_computed + num_tokens)
        if need <= capacity:
            return True
        self.fail(request, f"needs {need} blocks of KV for its window and chunk; the pool holds {capacity}")
        return False

    def _resident(self, request: StageRequest, plan: SchedulerPlan) -> bool:
        """True when the request's KV is all on the device; else it waits for a load or,
        with no room to load and nothing in flight, recomputes (preempted)."""
        resident = self.residency.ensure_resident(request, self.clock())
        if resident is None and not self.kv.tier.has_transfers_in_flight:
            self._preempt(request, plan)
        return bool(resident)

    def _reserve(self, request: StageRequest, num_tokens: int, ordered: list[StageRequest], plan: SchedulerPlan) -> bool:
        """Reserve KV for the chunk, evicting or preempting as the class docstring says.

        A WAITING request also leaves one block of growth for every admitted request
        still to plan this round (it may evict dormant KV for them, never preempt):
        otherwise a new request ordered first takes the blocks running ones were about
        to decode into, and they preempt each other.
        """
        assert self.kv is not None
        need = self.kv.num_new_blocks(request.request_id, num_tokens)
        growth = self._growth if request.status is RequestStatus.WAITING else 0
        if growth and need + growth > self.kv.num_free_blocks:
            self._evict(need + growth - self.kv.num_free_blocks)
            if need <= self.kv.num_free_blocks < need + growth:
                return False
        shortfall = need - self.kv.num_free_blocks
        if shortfall > 0 and not self._evict(shortfall):
            if self.residency.tiered and self.kv.tier.has_transfers_in_flight:
                return False
            victims = self._victims(request, ordered, plan, shortfall)
            if victims is None:
                return False
            for victim in victims:
                self._preempt(victim, plan)
        self.kv.reserve(request.request_id, num_tokens)
        return True

    def _evict(self, num_blocks: int) -> bool:
        """Move `num_blocks` dormant device blocks to the host tier, by its policy; False: not possible."""
        if not self.residency.tiered:
            return False
        self.residency.refresh_hints(self._dormant, self.clock())
        return self.kv.tier.num_evictable_blocks() >= num_blocks and self.kv.tier.evict(num_blocks)

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
        if request.status is RequestStatus.RUNNING:  # then active ones: held first, then from the end of the order
            rank = {r.request_id: i for i, r in enumerate(ordered)}
            active = [r for r in holders.values() if r.num_pending > 0]
            candidates += sorted(active, key=lambda r: rank.get(r.request_id, len(rank)), reverse=True)
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
            self.residency.forget(victim.request_id)
        victim.reset_computed()
        victim.status = RequestStatus.WAITING
        plan.preempted.append(victim.request_id)
        self.num_preemptions += 1

    def _remove(self, request: StageRequest) -> None:
        del self.requests[request.request_id]
        if self.kv is not None:
            self.kv.free(request.request_id)
            self.residency.forget(request.request_id)
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
            if self.window is not None:  # free what no later query reads: before the next position's window
                self.kv.drop(request.request_id, self.window.sinks, request.num_computed - self.window.tokens)
            if request.num_pending == 0:
                request.ready_since = None
                if request.is_dormant and self.residency is not None:
                    self.residency.went_dormant(request, now)
            if payload is not None:
                self._outputs.append(StageOutput(request.request_id, payload))
            if request.is_finished:
                finished.append(request)
        self._reap(finished)
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
