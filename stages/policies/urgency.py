"""Urgency: playback at risk first, then first audio, then KV relief against barge-in exposure."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvtier import blocks_for
from stages.interaction import InteractionView, PlaybackState
from stages.policies.base import PolicyKV, R, SchedulingPolicy
from stages.requests.base import RequestStatus
from stages.shared_device import SharedDevice
from stages.validation import require_number, require_positive_ints


@dataclass(frozen=True)
class UrgencyParams:
    """The urgency policy's parameters (YAML: `scheduler.urgency`).

    Playback buffers at or below `p_safe_ms` are at risk; at or above `p_yield_ms` (may
    be .inf: never) the request is held while a listener waits for first audio or is at
    risk at any stage on the same device; at or above `p_max_ms` (may be .inf: never) it
    is held until playback brings it down to `p_resume_ms` (None: back under `p_max_ms`;
    a lower mark paces in bursts, leaving a held context idle long enough to leave the
    device); `alpha` weighs barge-in exposure and `beta` KV-pressure relief in the
    utility that orders the remaining requests. Requests are held and yield only while
    the stage's KV, on the device and offloaded, with what the first-audio requests waiting
    for admission need, takes at most `pace_kv_share` of its pool (.inf: whatever it
    takes). First-audio requests are ordered as if each pending position took
    `u1_ms_per_position` ms (0: by ready age alone), at most `u1_max_pass_ms` in all: no
    first-audio request is passed by one that became ready more than
    `u1_max_pass_ms` after it (.inf: no bound). An admitted request's prefill short of KV
    waits for the replies decoding to end at most `prefill_patience_ms` from when it became
    ready, then preempts as FCFS's do (.inf: it waits while any decodes). While a reply
    playing at a stage with KV is at risk, a round prefills at most `at_risk_prefill_tokens`
    positions (None, the default: the stage's token budget; a count of positions, so a
    machine's own: what a round of them costs differs by model and device). While a reply
    playing at the stage has at most `gate_buffer_ms` (<= p_safe_ms) left to play,
    first-audio requests wait, each at most `first_audio_gate_ms` from when it became
    ready (0, the default: never; .inf: for as long as that lasts).
    """

    p_safe_ms: float = 400.0
    p_max_ms: float = 2000.0
    p_yield_ms: float = 1000.0
    p_resume_ms: float | None = None
    alpha: float = 1.0
    beta: float = 0.25
    pace_kv_share: float = 0.9
    u1_ms_per_position: float = 1.0
    u1_max_pass_ms: float = 500.0
    prefill_patience_ms: float = 500.0
    first_audio_gate_ms: float = 0.0
    gate_buffer_ms: float = 100.0
    at_risk_prefill_tokens: int | None = None

    def __post_init__(self) -> None:
        require_number(self, "p_safe_ms", lambda v: 0 < v < math.inf, "a finite number > 0")
        for name in ("p_max_ms", "p_yield_ms"):
            require_number(self, name, lambda v: v > self.p_safe_ms, f"a number > p_safe_ms ({self.p_safe_ms})")
        if self.p_resume_ms is not None:
            require_number(self, "p_resume_ms", lambda v: self.p_safe_ms < v < self.p_max_ms,
                           f"a number between p_safe_ms ({self.p_safe_ms}) and p_max_ms ({self.p_max_ms}), or null")
        for name in ("alpha", "beta", "u1_ms_per_position"):
            require_number(self, name, lambda v: 0 <= v < math.inf, "a finite number >= 0")
        require_number(self, "pace_kv_share", lambda v: v > 0, "a number > 0 (.inf: pace whatever the pool)")
        require_number(self, "u1_max_pass_ms", lambda v: v >= 0, "a number >= 0 (.inf: no bound)")
        require_number(self, "prefill_patience_ms", lambda v: v >= 0, "a number >= 0 (.inf: wait while any decodes)")
        require_number(self, "first_audio_gate_ms", lambda v: v >= 0, "a number >= 0 (.inf: no bound)")
        require_number(self, "gate_buffer_ms", lambda v: 0 <= v <= self.p_safe_ms,
                       f"a number between 0 and p_safe_ms ({self.p_safe_ms})")
        if self.at_risk_prefill_tokens is not None:
            require_positive_ints(self, "at_risk_prefill_tokens")


Playback = Callable[[str], PlaybackState | None]


def _no_telemetry(request_id: str) -> PlaybackState | None:
    return None


def _sorted(keys: list[float], requests: list[R]) -> list[R]:
    """`requests` by ascending `keys` (stable: ties keep the order given)."""
    return [requests[i] for i in sorted(range(len(keys)), key=keys.__getitem__)]


class UrgencyPolicy(SchedulingPolicy):
    """Orders ready requests by what their listener hears, from s = view.playback(id),
    P = s.buffer_ms(now, audio_ms) (with the audio the request produced that s does not count yet).

    - U0 playback at risk: started and P <= p_safe_ms. Served first, smallest P first.
    - U1 first audio: not started. Next, by when each would be served if its pending
      positions took `u1_ms_per_position` ms each: `ready_since` + min(num_pending x
      that, `u1_max_pass_ms`). Among listeners who started waiting together, the least
      work first (a burst of new turns: short prompts do not queue behind a long one's
      prefill). Regret against FCFS is bounded: a first-audio request is ordered behind
      only U0 requests and first-audio requests that became ready at most
      `u1_max_pass_ms` after it, so none starves, and what it waits for beyond FCFS's
      order is the work of turns that began within that bound of its own.
    - Gated (with `first_audio_gate_ms` > 0; off by default): while a reply playing here
      is about to run dry (P <= `gate_buffer_ms`), first-audio requests with telemetry
      sit the round out, each at most `first_audio_gate_ms` from its `ready_since`: a
      reply started is one the stage must then sustain, and starting more than it
      sustains makes every one of them run dry (a burst of new turns served first audio
      together: benchmarks/log/2026-11-30-decode-reserve-and-gate.md). New replies start
      as the ones playing recover or end, in waves, as under FCFS; the bound keeps a reply
      that stays short of audio from starving new turns. Only a nearly dry buffer counts:
      a reply just started is at risk (its first chunk is short) while the stage sustains
      it. Off by default: it trades first audio for continuity, and on a fresh grid it
      gave up more of the first than the second was worth (the same log).
    - U2 the rest: highest utility first,
      U = beta * K * R_occ - alpha * max(0, P - p_safe_ms) / p_safe_ms,
      K the KV blocks the request holds at this stage, R_occ the stage's KV occupancy
      (0 for a stage without KV): finishing big holders relieves memory pressure, and
      work far ahead of the listener is the most exposed to a barge-in.
    - Held: started and P >= p_max_ms, never served, even when nothing else is ready:
      generation stays within p_max_ms of what the listener hears (P counts only audio
      that needs no more work from this stage), and that is all a barge-in can throw
      away. It resumes as playback brings P back under p_max_ms, or with `p_resume_ms`
      set only once P is down to p_resume_ms; `resume_at` says when that will be (P
      draining at 1x), so that under memory pressure the stage may move the held KV
      out meanwhile rather than recompute an active request.
    - Paced only while the pools afford it: holding and yielding keep a reply's context
      active for its whole playback instead of the moments its computation takes, so
      pacing every reply makes every replying session's KV active at once. Once the
      stage's KV (on the device and offloaded) exceeds `pace_kv_share` of the pool,
      nothing is held or yields: replies finish as fast as the stage computes them and
      their KV goes dormant, where it may leave (benchmarks/memory_pressure.py: paced
      replies in a pool holding a quarter of the sessions' KV kept 20-28 contexts
      active where FCFS had 5-11, and a storm of recomputations followed). The same
      holds for any stage on the same device (the SharedDevice board): a thinker that
      holds a reply keeps the talker's context for it waiting mid-turn, so a talker past
      its share stops the thinker's pacing too (benchmarks/log/2026-11-29-robustness-grid.md:
      otherwise those talker contexts were preempted and recomputed in a storm).
      The KV that first-audio requests waiting for admission need counts as taken: a
      new turn only takes free KV (it preempts no one), so a paced reply's context
      would keep it out until that reply, paced, ends; with its room counted, a new
      turn that does not fit stops the pacing, and no hold or yield costs a waiting
      listener room for first audio.
    - Yielded: started and P >= p_yield_ms while a listener waits (U0 or U1 with
      telemetry) at this stage or at any stage sharing its device: left out so the
      device computes what a listener waits for; buffered at least p_yield_ms >
      p_safe_ms, it resumes as soon as nobody waits or its buffer drains under p_yield_ms.
    - Speculative (`is_speculative`: a partial transcript while the user still speaks):
      after U2, longest ready first; like work far ahead, it yields while a listener waits.
    A reply that has not started is never held: its listener is waiting. Fail closed:
    a request without telemetry is ordered as U1, since waiting for
    first audio is the one assumption that never starves a listener, but it makes no
    one yield. Ties keep the order given (the scheduler's: the order requests were added).

    A prefill short of KV does not preempt active requests while others decode: under
    pressure a new turn waits for replies to end rather than start a cascade of
    recomputations, and a recomputation always does. Any other prefill (a new turn of an
    admitted session, the rest of a chunked prompt) waits so at most `prefill_patience_ms`
    from when it became ready (`prefill_patience_s`), then preempts as FCFS's prefills do:
    waiting for replies to end is a wait FCFS's order does not have, so its regret is bounded.
    Nor does a first-audio prefill ordered before the replies playing take the token budget
    their next positions need (`reserves_decode_budget`): they decode in the same round.
    And while a reply playing at a stage with KV is at risk (U0), the round's prefills take at
    most `at_risk_prefill_tokens` positions (`prefill_cap`): that reply's next position comes
    when the round ends, and a round's time grows with its prefill. In a burst of new turns
    the replies started first otherwise ran dry while the rest prefilled in rounds of 512
    positions (a grid scenario of 48 users at once: benchmarks/log/2026-12-01-prefill-cap.md).

    Counters: `rounds`, and per request and round exactly one of `u0`, `u1`, `u2`,
    `fallbacks` (no telemetry, ordered as U1), `speculative`, `held`, `yielded` and `gated`.
    """

    reserves_decode_budget = True

    def __init__(self, params: UrgencyParams, view: InteractionView | None = None,
                 kv: PolicyKV | None = None, device: SharedDevice | None = None) -> None:
        super().__init__(params, view, kv, device)
        self.prefill_patience_s = params.prefill_patience_ms / 1000.0
        self.num_rounds = self.num_u0 = self.num_u1 = self.num_u2 = 0
        self.num_fallbacks = self.num_speculative = self.num_held = self.num_yielded = self.num_gated = 0
        self._slot = device.join() if device is not None else None

    def order(self, requests: Sequence[R], now: float) -> list[R]:
        playback = self.view.playback if self.view is not None else _no_telemetry
        pool_affords = self._pool_affords_pacing(requests, playback)
        self.prefill_cap = None
        if not requests:
            self._report(False, pool_affords)
            self.resume_at = {}
            return []
        params = self.params
        p_safe, p_max = params.p_safe_ms, params.p_max_ms
        exposure = params.alpha / p_safe  # utility lost per ms of buffer beyond p_safe
        s_per_position, max_pass_s = params.u1_ms_per_position / 1000.0, params.u1_max_pass_ms / 1000.0
        p_resume = params.p_max_ms if params.p_resume_ms is None else params.p_resume_ms  # where a hold ends
        paced = pool_affords and not (self.device is not None and self.device.kv_pressed)
        if not paced:
            p_max = p_resume = math.inf
        was_held, resume_at = self.resume_at, {}
        pressure = params.beta * self.kv.occupancy if self.kv is not None else 0.0  # beta * R_occ
        blocks_held = self.kv.num_blocks_held if pressure else None  # K, looked up only when it counts
        running = RequestStatus.RUNNING
        # Per class, parallel lists of float keys and requests: one cheap float sort each.
        u0_keys, u0, u1_keys, u1, u2_keys, u2, u2_buffers = [], [], [], [], [], [], []
        guess_keys, guesses = [], []
        num_fallbacks = num_held = 0
        for request in requests:
            if request.is_speculative:
                guess_keys.append(request.ready_since)
                guesses.append(request)
                continue
            state = playback(request.request_id)
            unpublished_ms = 0.0 if state is None else state.unpublished_ms(request.audio_ms)
            if state is None or not (state.started or unpublished_ms):
                u1_keys.append(request.ready_since + min(request.num_pending * s_per_position, max_pass_s))
                u1.append(request)
                num_fallbacks += state is None
                continue
            drain_s = state.drained_at - now  # P = state.buffer_ms(now, audio_ms), inlined: the hot path
            buffer_ms = (drain_s * 1000.0 if drain_s > 0.0 else 0.0) + state.queued_ms + unpublished_ms
            if buffer_ms <= p_safe:
                u0_keys.append(buffer_ms)
                u0.append(request)
                continue
            if buffer_ms >= p_max or (request.request_id in was_held and buffer_ms > p_resume):
                num_held += 1
                resume_at[request.request_id] = now + (buffer_ms - p_resume) / 1000.0
                continue
            cost = exposure * (buffer_ms - p_safe)  # -U, lowest first; buffer_ms > p_safe, so no max(0, .)
            if pressure and request.status is running:  # a WAITING request holds no KV
                cost -= pressure * blocks_held(request.request_id)
            u2_keys.append(cost)
            u2.append(request)
            u2_buffers.append(buffer_ms)
        self.resume_at = resume_at
        if u0 and self.kv is not None:
            self.prefill_cap = params.at_risk_prefill_tokens
        num_gated = 0
        if params.first_audio_gate_ms and u0 and len(u1) > num_fallbacks and min(u0_keys) <= params.gate_buffer_ms:
            u1_keys, u1, num_gated = self._gate(u1_keys, u1, playback, now)
        waiting_here = bool(u0) or len(u1) > num_fallbacks
        self._report(waiting_here, pool_affords)
        yielding = paced and (waiting_here or (self.device is not None and self.device.listener_waiting))
        if yielding:
            kept = [i for i, buffer_ms in enumerate(u2_buffers) if buffer_ms < params.p_yield_ms]
            u2_keys, u2, num_yielded = [u2_keys[i] for i in kept], [u2[i] for i in kept], len(u2) - len(kept)
            num_yielded += len(guesses)
            guess_keys, guesses = [], []
        else:
            num_yielded = 0
        self._count(len(u0), len(u1) - num_fallbacks, len(u2), num_fallbacks, len(guesses), num_held, num_yielded,
                    num_gated)
        return _sorted(u0_keys, u0) + _sorted(u1_keys, u1) + _sorted(u2_keys, u2) + _sorted(guess_keys, guesses)

    def _gate(self, keys: list[float], requests: list[R], playback: Playback,
              now: float) -> tuple[list[float], list[R], int]:
        """The first-audio requests that are not gated (fallbacks never are), and how many are."""
        gate_s = self.params.first_audio_gate_ms / 1000.0
        kept = [i for i, r in enumerate(requests)
                if playback(r.request_id) is None or now - (now if r.ready_since is None else r.ready_since) >= gate_s]
        return [keys[i] for i in kept], [requests[i] for i in kept], len(requests) - len(kept)

    def _pool_affords_pacing(self, requests: Sequence[R], playback: Playback) -> bool:
        kv, share = self.kv, self.params.pace_kv_share
        if kv is None or share == math.inf:
            return True
        taken, limit = kv.num_used_blocks + kv.num_offloaded_blocks_total, share * kv.num_blocks
        return taken <= limit and taken + self._first_audio_blocks(requests, playback) <= limit

    def _first_audio_blocks(self, requests: Sequence[R], playback: Playback) -> int:
        """The KV blocks the first-audio requests waiting for admission need for their pending positions."""
        size, waiting, blocks = self.kv.block_size, RequestStatus.WAITING, 0
        for request in requests:
            if request.status is waiting and not request.is_speculative:
                state = playback(request.request_id)
                if state is None or not state.is_started(request.audio_ms):
                    blocks += blocks_for(request.num_pending, size)
        return blocks

    def _report(self, waiting_here: bool, pool_affords: bool) -> None:
        if self._slot is not None:
            self.device.report(self._slot, waiting_here, not pool_affords)

    def _count(self, num_u0: int, num_u1: int, num_u2: int, num_fallbacks: int, num_speculative: int,
               num_held: int, num_yielded: int, num_gated: int) -> None:
        self.num_rounds += 1
        self.num_u0 += num_u0
        self.num_u1 += num_u1
        self.num_u2 += num_u2
        self.num_fallbacks += num_fallbacks
        self.num_speculative += num_speculative
        self.num_held += num_held
        self.num_yielded += num_yielded
        self.num_gated += num_gated

    @property
    def counters(self) -> dict[str, int]:
        return {
            "rounds": self.num_rounds, "u0": self.num_u0, "u1": self.num_u1, "u2": self.num_u2,
            "fallbacks": self.num_fallbacks, "speculative": self.num_speculative, "held": self.num_held,
            "yielded": self.num_yielded, "gated": self.num_gated,
        }
