"""Preemption: whom to take KV from when the pool runs dry, and taking it."""

from __future__ import annotations

from stages.plan import SchedulerPlan
from stages.requests.base import RequestStatus, StageRequest
from stages.residency import Residency


class Preemptor:
    """Chooses victims among a stage's requests and preempts them.

    Victims are admitted (RUNNING) requests that hold KV and are not planned this
    round: residents with no pending work first, least recently scheduled first; for
    a RUNNING request then also active ones, those the policy held (left out of its
    order) first, then the latest arrivals first (ties: from the end of the order): FCFS's
    victims whatever the policy, the requests with the least work to lose (victims from
    the end of the urgency order were long replies, recomputed whole:
    benchmarks/log/2026-11-29-robustness-grid.md). A WAITING request, and room to load
    KV that is on the host (`idle_only`), take idle residents only.

    With `prefill_patience_s` > 0, a prefill (a request with more than one position
    pending: a new turn, or a recomputation) takes no active request's KV while another
    admitted request decodes this round (planned already, or still to plan after it in
    the order; held ones do not): it waits for replies to end instead, since a
    recomputation needs room in turn and under pressure makes the next one (the cascade
    of a preemption storm); with no one decoding, nothing else would free room, so it
    does. A prefill never preempted (a new turn of an admitted session, the rest of a
    chunked prompt) waits so at most `prefill_patience_s` from its `ready_since`, then
    preempts as FCFS's do; a recomputation waits for as long as others decode. A decoder
    that was not planned before it, or is stranded (its KV on the host, no room to load
    it), is not decoding: counting it would leave both waiting for each other forever.

    Preempting frees the victim's KV and sends it back to WAITING, to recompute from
    position 0, a dormant one once its next turn arrives (past the positions it forgot:
    a windowed request recomputes its sinks and its recent past only, see
    SinksAndWindow): a windowed stream may be a victim like any other, at a cost bounded
    however long it ran, unless it keeps a history state that recomputation would not
    rebuild (`Residency.recomputable`): that one never is (idle, its KV may still move
    to a host tier).
    """

    def __init__(self, requests: dict[str, StageRequest], residency: Residency,
                 prefill_patience_s: float = 0.0) -> None:
        self.requests = requests
        self.residency = residency
        self.prefill_patience_s = prefill_patience_s
        self.num_preemptions = 0

    def victims(self, request: StageRequest, ordered: list[StageRequest], plan: SchedulerPlan,
                shortfall: int, idle_only: bool = False) -> list[StageRequest] | None:
        """The fewest victims, in preemption order, that free `shortfall` blocks for `request` (idle
        residents only with `idle_only`); None if all of them would not (then nobody is preempted in vain)."""
        held = self.residency.blocks_held
        planned = {c.request.request_id for c in plan.chunks} | {request.request_id}
        holders = [r for r in self.requests.values() if r.status is RequestStatus.RUNNING
                   and r.request_id not in planned and held(r.request_id) and self.residency.recomputable(r)]
        candidates = sorted((r for r in holders if r.num_pending == 0), key=lambda r: r.last_scheduled_time)
        if self._may_take_active(request, ordered, plan, idle_only):  # held first, then the newest first
            rank = {r.request_id: i for i, r in enumerate(ordered)}
            active = [r for r in holders if r.num_pending > 0]
            latest_first = sorted(active, key=lambda r: (r.request_id not in rank, r.arrival_time,
                                                         rank.get(r.request_id, 0)), reverse=True)
            candidates += latest_first
        victims, freed = [], 0
        for victim in candidates:
            if freed >= shortfall:
                break
            victims.append(victim)
            freed += held(victim.request_id)
        return victims if freed >= shortfall else None

    def _may_take_active(self, request: StageRequest, ordered: list[StageRequest], plan: SchedulerPlan,
                         idle_only: bool) -> bool:
        if idle_only or request.status is not RequestStatus.RUNNING:
            return False
        if request.num_pending <= 1 or not self._is_patient(request, plan.now):
            return True
        planned = {chunk.request.request_id for chunk in plan.chunks}
        still_to_plan = False
        for r in ordered:
            if r is request:
                still_to_plan = True
            elif r.is_decoding and (
                    r.request_id in planned or (still_to_plan and not self.residency.is_stranded(r.request_id))):
                return False
        return True

    def _is_patient(self, request: StageRequest, now: float) -> bool:
        """Whether this prefill still waits for the decoders rather than preempt."""
        if self.prefill_patience_s == 0.0:
            return False
        ready_since = now if request.ready_since is None else request.ready_since
        return request.num_preemptions > 0 or now - ready_since < self.prefill_patience_s

    def preempt(self, victim: StageRequest, plan: SchedulerPlan) -> None:
        self.residency.free(victim.request_id)
        victim.reset_computed()
        victim.status = RequestStatus.WAITING
        victim.num_preemptions += 1
        plan.preempted.append(victim.request_id)
        self.num_preemptions += 1
