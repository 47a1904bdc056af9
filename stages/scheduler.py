"""Continuous batching for one stage: a thin loop over the policy, a batch planner, a preemptor and the
residency manager."""

from __future__ import annotations

from collections.abc import Callable

from kvtier import KVCacheManager
from stages.batch_planner import BatchPlanner
from stages.config import SchedulerConfig
from stages.interaction import InteractionView
from stages.kv_residency import KVResidency
from stages.no_kv_residency import NoKVResidency
from stages.plan import RunnerOutput, SchedulerPlan, StageOutput
from stages.policies import make_policy
from stages.preemptor import Preemptor
from stages.requests.base import RequestStatus, StageRequest
from stages.residency import Residency
from stages.shared_device import SharedDevice


class Scheduler:
    """Decides each round which positions of which requests run; one manager per resource.

    A round completes the KV transfers that finished, reaps finished requests, stamps
    `ready_since` on requests that just got pending work and asks the policy which
    ready requests to serve and in what order (it may hold some or all back, e.g. for
    another stage on its `device` whose listener waits; the order alone decides
    whether admitted (RUNNING) requests go before WAITING ones). Then:
    - the `planner` (BatchPlanner) walks that order within `max_num_batched_tokens`
      and `max_num_seqs`, chunking long prefills and reserving each chunk's KV before
      planning it (ask, then commit); a request that could never fit the pool fails;
    - the `preemptor` (Preemptor) chooses whom to preempt when the pool runs dry:
      idle residents first, least recently scheduled first; a running request may also
      preempt a running request not planned this round, held ones first, then from the
      end of the order; a waiting one idle residents only. Preemption frees the KV and
      sends the request back to WAITING for recomputation;
    - the `residency` manager (Residency: KVResidency, or NoKVResidency for a stage
      without KV) does everything else with KV: with a host tier dormant residents are
      written back and, before anything is preempted, their device blocks are evicted
      by the tier's policy, as are those of requests the policy holds for a while (its
      `resume_at`); a RUNNING request whose KV is away waits for its load, and while
      transfers are in flight a shortfall waits for them rather than preempting. With
      a window (its DropStrategy), every committed chunk frees the request's blocks
      that no later query reads, so a request holds about sinks + window + one chunk
      of KV however long it runs and fails only if that much can never fit the pool.

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
        self.preemptor = Preemptor(self.requests, self.residency, self.policy.prefill_patience_s)
        self.planner = BatchPlanner(config, self.residency, self.preemptor, clock, self.fail,
                                    self.policy.reserves_decode_budget)
        self._outputs: list[StageOutput] = []

    @property
    def num_preemptions(self) -> int:
        return self.preemptor.num_preemptions

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
            self.requests[request_id].speech_paused()
            self.residency.speech_paused(request_id, lead_s, self.clock())

    def schedule(self) -> SchedulerPlan:
        now = self.clock()
        plan = SchedulerPlan(now)
        self.residency.poll(now)
        ready, dormant = self._scan(now, plan.ready)
        self.residency.sweep(dormant, now)
        ordered = self.policy.order(ready, now)
        self.residency.follow_holds(self.policy.resume_at, self.requests, now)
        self.planner.plan(ordered, plan, self.policy.prefill_cap)
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
