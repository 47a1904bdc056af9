"""The scheduler's side of two-tier KV: what each request's KV is doing, hints, loads and their cost."""

from __future__ import annotations

from dataclasses import dataclass

from kvtier import KVCacheManager, TransferDone
from stages.interaction import InteractionView
from stages.requests.base import RequestStatus, StageRequest

SWEEP_S = 0.1
PRELOAD_TRIGGERS = ("speech_start", "pause")
RESUME_LEAD_S = 0.3  # a held request's offloaded KV starts coming back this long before it resumes
PREDICTED_LEAD_S = 1.0  # a dormant request's offloaded KV starts coming back this long before its predicted use
FREE_RESERVE = 0.1  # a predicted preload leaves this share of the pool free (for what runs meanwhile)


@dataclass
class ReloadCounters:
    """Cumulative reload figures of one stage (seconds, bytes, counts)."""

    critical_s: float = 0.0      # ready requests waiting for their KV to come back
    background_s: float = 0.0    # load transfer time nobody waited for (preloads)
    loaded_bytes: int = 0
    load_fallbacks: int = 0      # no room to load: the request recomputes instead


class KVResidency:
    """Keeps kvtier told what each request's KV is doing, and times reloads.

    - A RUNNING request that goes dormant becomes evictable, with a next-use hint
      from the view (`now` when unknown, so sessions we know nothing about are
      evicted last), and is written back to the host tier in the background; one
      that gets work again is in use, never a victim.
    - `ensure_resident` is asked before a RUNNING request is planned: True when all
      its KV is on the device; otherwise it starts (or promotes) a foreground load
      and the request waits. The wait, from the round that found the KV away to the
      load's completion, is reload time on the critical path; load time nobody
      waited for is off it.
    - `held` is told which requests the policy holds for a while and when each
      resumes: their KV becomes evictable with that next use and is written back,
      and what left starts loading RESUME_LEAD_S before the resume. `woke` ends it.
    - `speech_started` protects the request's KV for the expected lead time (when
      `protect_speaking`); with `preload` on, a background load starts once the
      user goes quiet (`speech_paused`, `preload_at` "pause"), which keeps a speaking
      user's KV off the device until their turn is about to end, or at once
      (`preload_at` "speech_start").
    - `sweep` (at most every SWEEP_S) refreshes the dormant requests' next-use hints.
      With `preload` on, a dormant request whose KV pressure moved to the host comes
      back once its predicted next use is within PREDICTED_LEAD_S (a session that
      writes gives no speech to preload at), into free room only: the load must leave
      FREE_RESERVE of the pool free, and is tried once until the request wakes.
      With `idle_offload_s` set, it also moves to the host the KV of dormant requests
      not needed for that long, pressure or not, so that device residency follows
      the conversation; speech brings it back (preload).
    Without a host tier every call is a no-op and every request is resident.
    """

    def __init__(self, kv: KVCacheManager, view: InteractionView | None, preload: bool, protect_speaking: bool,
                 idle_offload_s: float | None = None, preload_at: str = "pause") -> None:
        if preload_at not in PRELOAD_TRIGGERS:
            raise ValueError(f"preload_at must be one of {PRELOAD_TRIGGERS}, got {preload_at!r}")
        self.kv = kv
        self.view = view
        self.preload = preload
        self.preload_at = preload_at
        self.protect_speaking = protect_speaking
        self.idle_offload_s = idle_offload_s
        self._next_sweep = 0.0
        self.tiered = kv.tier.link_gbps is not None
        self.counters = ReloadCounters()
        self._waiting_since: dict[str, float] = {}
        self._hold_preloads: set[str] = set()  # held requests whose preload was asked for this hold
        self._predicted: set[str] = set()  # dormant requests whose predicted preload was tried since they slept

    def went_dormant(self, request: StageRequest, now: float) -> None:
        if self.tiered and request.status is RequestStatus.RUNNING:
            self.kv.set_evictable(request.request_id, True)
            self.kv.set_next_use(request.request_id, self._next_use(request.request_id, now))
            self.kv.store(request.request_id)

    def woke(self, request: StageRequest) -> None:
        self._predicted.discard(request.request_id)
        if self.tiered and request.status is RequestStatus.RUNNING:
            self.kv.set_evictable(request.request_id, False)

    def held(self, resume_at: dict[str, float], was_held: dict[str, float], now: float) -> None:
        """`resume_at`: the requests held now and when each resumes; `was_held`: the last round's."""
        if not self.tiered:
            return
        kv = self.kv
        self._hold_preloads &= resume_at.keys()
        for request_id, at in resume_at.items():
            if request_id not in was_held:
                kv.set_evictable(request_id, True)
                kv.store(request_id)
            kv.set_next_use(request_id, at)
            due = at - now <= RESUME_LEAD_S and request_id not in self._hold_preloads
            if due and not kv.is_resident(request_id):
                self._hold_preloads.add(request_id)  # once per hold: a miss loads on the path, when it resumes
                kv.preload(request_id, at - now)

    def refresh_hints(self, dormant: list[StageRequest], now: float) -> None:
        """Update next-use hints of dormant residents (before choosing victims)."""
        for request in dormant:
            self.kv.set_next_use(request.request_id, self._next_use(request.request_id, now))

    def sweep(self, dormant: list[StageRequest], now: float) -> None:
        if not self.tiered or now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_S
        self.refresh_hints(dormant, now)
        if self.preload and self.view is not None:
            self._preload_predicted(dormant, now)
        if self.idle_offload_s is not None:
            self.kv.tier.evict_beyond(now + self.idle_offload_s)

    def _preload_predicted(self, dormant: list[StageRequest], now: float) -> None:
        kv = self.kv
        reserve = FREE_RESERVE * kv.pool.num_blocks
        for request in dormant:
            request_id = request.request_id
            at = self.view.next_use(request_id)
            if at is None or at - now > PREDICTED_LEAD_S or request_id in self._predicted:
                continue
            offloaded = kv.num_offloaded_blocks(request_id)
            if offloaded and kv.num_free_blocks - offloaded >= reserve:
                self._predicted.add(request_id)
                kv.preload(request_id, max(at - now, RESUME_LEAD_S))

    def _next_use(self, request_id: str, now: float) -> float:
        at = self.view.next_use(request_id) if self.view is not None else None
        return now if at is None else at

    def ensure_resident(self, request: StageRequest, now: float) -> bool | None:
        """True: resident. False: a load is under way, wait. None: no room to load it."""
        request_id = request.request_id
        if not self.tiered or self.kv.is_resident(request_id):
            return True
        if request_id not in self._waiting_since:
            if not self.kv.load(request_id):
                self.counters.load_fallbacks += 1
                return None
            self._waiting_since[request_id] = now
        return False

    def speech_started(self, request_id: str, lead_s: float, now: float) -> str | None:
        """Protect (and preload at speech start) a request whose user started speaking; the preload outcome."""
        if not self.tiered:
            return None
        if self.protect_speaking:
            self.kv.protect(request_id, now + lead_s)
        return self._preload(request_id, lead_s, "speech_start")

    def speech_paused(self, request_id: str, lead_s: float, now: float) -> str | None:
        """Preload at a pause a request whose user went quiet; the preload outcome."""
        return self._preload(request_id, lead_s, "pause") if self.tiered else None

    def _preload(self, request_id: str, lead_s: float, trigger: str) -> str | None:
        return self.kv.preload(request_id, lead_s) if self.preload and self.preload_at == trigger else None

    def forget(self, request_id: str) -> None:
        self._waiting_since.pop(request_id, None)
        self._predicted.discard(request_id)

    def poll(self, now: float) -> None:
        """Complete finished transfers and account for loads."""
        if not self.tiered:
            return
        for done in self.kv.tier.poll():
            if done.kind == "load":
                self._account_load(done, now)

    def _account_load(self, done: TransferDone, now: float) -> None:
        since = self._waiting_since.pop(done.seq, None)
        waited = 0.0 if since is None else now - since
        self.counters.critical_s += waited
        self.counters.background_s += max(0.0, done.seconds - waited)
        if not done.cancelled:
            self.counters.loaded_bytes += done.num_bytes
