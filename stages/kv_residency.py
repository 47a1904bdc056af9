"""The residency manager of a stage with KV: room, reservations, windows, hints to the tier, loads and their cost."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kvtier import KVCacheManager, TransferDone
from stages.config import WindowSpec
from stages.drop_strategy import drop_strategy
from stages.interaction import InteractionView
from stages.requests.base import RequestStatus, StageRequest
from stages.residency import Residency

SWEEP_S = 0.1
PRELOAD_TRIGGERS = ("speech_start", "pause")
RESUME_LEAD_S = 0.3  # a held request's offloaded KV starts coming back this long before it resumes
PREDICTED_LEAD_S = 1.0  # a dormant request's offloaded KV starts coming back this long before its predicted use
FREE_RESERVE = 0.1  # every preload leaves this share of the pool free (for what runs meanwhile)
IDLE_EVICTABLE_OCCUPANCY = 0.9  # past this share of the pool in use, KV idle mid-turn may go to the host


@dataclass
class ReloadCounters:
    """Cumulative reload figures of one stage (seconds, bytes, counts)."""

    critical_s: float = 0.0      # ready requests waiting for their KV to come back
    background_s: float = 0.0    # load transfer time nobody waited for (preloads)
    loaded_bytes: int = 0
    load_waits: int = 0          # rounds a request waited for room to load its KV
    protections_lifted: int = 0  # times protected KV was made evictable for want of room


class KVResidency(Residency):
    """Manages a stage's KV for its scheduler (see Residency), keeps kvtier told what each request's
    KV is doing, and times reloads. Without a host tier (kvtier's DeviceOnlyTier) nothing is ever
    offloaded: every request is resident and hints change nothing.

    - Room: a chunk that does not fit first evicts dormant KV to the host tier, by the
      tier's policy, after refreshing the dormant requests' next-use hints; while
      transfers are in flight a shortfall waits for them rather than preempting. A
      WAITING request may evict for the `growth` it leaves, never preempt for it.
    - Windows: `window` (None: unbounded) picks the DropStrategy that says what fits,
      what each committed chunk frees and which truncations are refused.
    - A RUNNING request that goes dormant becomes evictable, with a next-use hint
      from the view (`now` when unknown, so sessions we know nothing about are
      evicted last), and is written back to the host tier in the background; one
      that gets work again is in use, never a victim. So does one left idle mid-turn
      (waiting for input from the stage before it: a talker behind a paced thinker)
      while IDLE_EVICTABLE_OCCUPANCY of the pool is in use, with next use `now`: under
      pressure its KV goes to the host, the last to go, instead of being recomputed
      whole by a preemption.
    - `ensure_resident` starts (or promotes) a foreground load of KV that is away,
      evicting dormant KV for room; what eviction cannot free it reports missing.
      The wait, from the round that found the KV away to the load's completion, is
      reload time on the critical path; load time nobody waited for is off it.
    - Held requests (`follow_holds`): their KV becomes evictable with their resume time
      as next use and is written back (under pressure it goes to the host rather than
      an active request's being recomputed), and what left starts loading RESUME_LEAD_S
      before the resume; one released is in use again unless it went dormant meanwhile.
    - Every preload leaves FREE_RESERVE of the pool free: it may displace dormant KV
      needed later (the tier's policy says whose), never the room running requests
      grow into.
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
    """

    def __init__(self, kv: KVCacheManager, view: InteractionView | None = None, preload: bool = False,
                 protect_speaking: bool = False, idle_offload_s: float | None = None, preload_at: str = "pause",
                 window: WindowSpec | None = None) -> None:
        if preload_at not in PRELOAD_TRIGGERS:
            raise ValueError(f"preload_at must be one of {PRELOAD_TRIGGERS}, got {preload_at!r}")
        self.kv = kv
        self.view = view
        self.preload = preload
        self.preload_at = preload_at
        self.protect_speaking = protect_speaking
        self.idle_offload_s = idle_offload_s
        self.drop = drop_strategy(window)
        self.counters = ReloadCounters()
        self._next_sweep = 0.0
        self._dormant: list[StageRequest] = []  # this round's, from `sweep`
        self._held: dict[str, float] = {}  # the policy's last `resume_at`
        self._waiting_since: dict[str, float] = {}
        self._hold_preloads: set[str] = set()  # held requests whose preload was asked for this hold
        self._predicted: set[str] = set()  # dormant requests whose predicted preload was tried since they slept

    def woke(self, request: StageRequest) -> None:
        self._predicted.discard(request.request_id)
        if request.status is RequestStatus.RUNNING:
            self.kv.set_evictable(request.request_id, False)

    def committed(self, request: StageRequest, now: float) -> None:
        self.drop.committed(self.kv, request)
        if request.num_pending or request.status is not RequestStatus.RUNNING:
            return
        if request.is_dormant:
            next_use = self._next_use(request.request_id, now)
        elif self.kv.occupancy >= IDLE_EVICTABLE_OCCUPANCY:
            next_use = now  # idle mid-turn (its input still to come): under pressure it leaves last, not recomputed
        else:
            return
        self.kv.set_evictable(request.request_id, True)
        self.kv.set_next_use(request.request_id, next_use)
        self.kv.store(request.request_id)

    def follow_holds(self, resume_at: dict[str, float], requests: dict[str, StageRequest], now: float) -> None:
        kv, was_held = self.kv, self._held
        for request_id in was_held.keys() - resume_at.keys():
            request = requests.get(request_id)
            if request is not None and not request.is_dormant:
                self.woke(request)
        self._hold_preloads &= resume_at.keys()
        for request_id, at in resume_at.items():
            if request_id not in was_held:
                kv.set_evictable(request_id, True)
                kv.store(request_id)
            kv.set_next_use(request_id, at)
            due = at - now <= RESUME_LEAD_S and request_id not in self._hold_preloads
            if due and not kv.is_resident(request_id):
                self._hold_preloads.add(request_id)  # once per hold: a miss loads on the path, when it resumes
                kv.preload(request_id, at - now, self._reserve)
        self._held = resume_at

    def sweep(self, dormant: list[StageRequest], now: float) -> None:
        self._dormant = dormant
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_S
        self._refresh_hints(now)
        if self.preload and self.view is not None:
            self._preload_predicted(now)
        if self.idle_offload_s is not None:
            self.kv.tier.evict_beyond(now + self.idle_offload_s)

    def _refresh_hints(self, now: float) -> None:
        for request in self._dormant:
            self.kv.set_next_use(request.request_id, self._next_use(request.request_id, now))

    @property
    def _reserve(self) -> int:
        return int(FREE_RESERVE * self.kv.pool.num_blocks)

    def _preload_predicted(self, now: float) -> None:
        kv, reserve = self.kv, self._reserve
        for request in self._dormant:
            request_id = request.request_id
            at = self.view.next_use(request_id)
            if at is None or at - now > PREDICTED_LEAD_S or request_id in self._predicted:
                continue
            offloaded = kv.num_offloaded_blocks(request_id)
            if offloaded and kv.num_free_blocks - offloaded >= reserve:
                self._predicted.add(request_id)
                kv.preload(request_id, max(at - now, RESUME_LEAD_S), reserve)

    def _next_use(self, request_id: str, now: float) -> float:
        at = self.view.next_use(request_id) if self.view is not None else None
        return now if at is None else at

    def never_fits(self, request: StageRequest, end: int) -> str | None:
        return self.drop.never_fits(self.kv, request, end)

    def ensure_resident(self, request: StageRequest, now: float) -> int | None:
        request_id, kv = request.request_id, self.kv
        if kv.is_resident(request_id):
            return 0
        if request_id in self._waiting_since:
            return None
        if kv.load(request_id) or self._lift_protections(lambda: kv.load(request_id)):
            self._waiting_since[request_id] = now
            return None
        self.counters.load_waits += 1
        missing = kv.num_offloaded_blocks(request_id) - kv.num_free_blocks - kv.tier.num_evictable_blocks()
        return missing if missing > 0 else None

    def shortfall(self, request: StageRequest, end: int, growth: int, now: float) -> int | None:
        kv = self.kv
        need = kv.num_new_blocks(request.request_id, end, request.num_computed) + self._new_state_blocks(request)
        if growth and need + growth > kv.num_free_blocks:
            self._evict(need + growth - kv.num_free_blocks, now)
            if need <= kv.num_free_blocks < need + growth:
                return None
        missing = need - kv.num_free_blocks
        if missing <= 0 or self._evict(missing, now):
            return 0
        return None if kv.tier.has_transfers_in_flight else missing

    def _evict(self, num_blocks: int, now: float) -> bool:
        """Move `num_blocks` dormant device blocks to the host tier, by its policy; False: not possible."""
        self._refresh_hints(now)
        tier = self.kv.tier
        if tier.num_evictable_blocks() >= num_blocks and tier.evict(num_blocks):
            return True
        return self._lift_protections(lambda: tier.num_evictable_blocks() >= num_blocks and tier.evict(num_blocks))

    def _lift_protections(self, retry: Callable[[], bool]) -> bool:
        """With no room otherwise, protected KV (a speaking user's, a preload's) may leave: another load
        later costs less than the recompute or the wait it spares. `retry` is the attempt to make again."""
        if not self.kv.tier.lift_protections():
            return False
        self.counters.protections_lifted += 1
        return retry()

    def reserve(self, request: StageRequest, end: int) -> None:
        state_blocks = self._new_state_blocks(request)
        if state_blocks:
            self.kv.reserve_state(request.request_id, state_blocks)
        self.kv.skip(request.request_id, request.num_computed)
        self.kv.reserve(request.request_id, end)

    def _new_state_blocks(self, request: StageRequest) -> int:
        """The state blocks a request that holds no KV yet takes with its first chunk."""
        request_id, kv = request.request_id, self.kv
        if kv.num_blocks_held(request_id) or kv.num_offloaded_blocks(request_id):
            return 0
        return self.drop.state_blocks(kv)

    def recomputable(self, request: StageRequest) -> bool:
        return self.drop.recomputable

    def free(self, request_id: str) -> None:
        self.kv.free(request_id)
        self._waiting_since.pop(request_id, None)
        self._predicted.discard(request_id)

    def truncate(self, request: StageRequest, num_tokens: int) -> None:
        self.drop.check_truncate(self.kv, request, num_tokens)
        request.truncate(num_tokens)
        self.kv.truncate(request.request_id, num_tokens)

    def speech_started(self, request_id: str, lead_s: float, now: float) -> str | None:
        if self.protect_speaking:
            self.kv.protect(request_id, now + lead_s)
        return self._preload(request_id, lead_s, "speech_start")

    def speech_paused(self, request_id: str, lead_s: float, now: float) -> str | None:
        return self._preload(request_id, lead_s, "pause")

    def _preload(self, request_id: str, lead_s: float, trigger: str) -> str | None:
        if not self.preload or self.preload_at != trigger:
            return None
        return self.kv.preload(request_id, lead_s, self._reserve)

    def poll(self, now: float) -> None:
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

    def blocks_held(self, request_id: str) -> int:
        return self.kv.num_blocks_held(request_id)

    def blocks_to_grow(self, request: StageRequest) -> int:
        start = request.num_computed
        return min(1, self.kv.num_new_blocks(request.request_id, start + 1, start))

    def is_stranded(self, request_id: str) -> bool:
        return not self.kv.is_resident(request_id) and request_id not in self._waiting_since

    def resident_tokens(self, request_ids: Iterable[str]) -> dict[str, int]:
        return {request_id: self.kv.num_resident_tokens(request_id) for request_id in request_ids}

    @property
    def is_waiting_on_kv(self) -> bool:
        return self.kv.tier.has_transfers_in_flight

    def block_counts(self) -> tuple[int, int, int]:
        return self.kv.num_used_blocks, self.kv.num_free_blocks, self.kv.peak_used_blocks

    def kv_counters(self) -> dict[str, float]:
        tier, reloads = self.kv.tier, self.counters
        if tier.link_gbps is None:  # no host tier: nothing moves, nothing to report
            return {}
        return {**tier.stats, "link_gbps": tier.link_gbps, "reload_critical_s": reloads.critical_s,
                "reload_background_s": reloads.background_s, "reload_bytes": reloads.loaded_bytes,
                "load_waits": reloads.load_waits, "protections_lifted": reloads.protections_lifted}

    def close(self) -> None:
        self.kv.tier.close()

    def check_integrity(self, requests: Iterable[StageRequest]) -> None:
        self.kv.check_integrity()
        for request in requests:
            held, gap = self.kv.num_blocks_held(request.request_id), request.forgotten
            assert request.num_computed >= 0, f"{request.request_id}: negative num_computed"
            if request.status is RequestStatus.WAITING:
                restart = gap.stop if gap.start == 0 else 0
                assert held == 0 and request.num_computed == restart, f"{request.request_id} waits but holds KV"
            else:  # reserved up to what it computed, or up to the forgotten positions it then resumed past
                reserved = self.kv.table(request.request_id).num_tokens
                assert request.num_computed <= (gap.stop if reserved == gap.start else reserved), request.request_id
