"""A seeded discrete-time simulation of one overloaded thinker stage serving voice sessions
(over 300 lines: the workload, the simulated listeners and the summary live together, one script).

The real `Scheduler`, with its real policy and a real `KVCacheManager`, serves
multi-turn sessions whose context stays resident between turns. What is fake: the
model (every sampled token is 7, replies end at their drawn length), the clock and
the cost of a round (`StageModel.step_s`). Every generated token is delivered at
once as `audio_ms_per_token` of audio to a player that starts at the reply's first
token and plays at 1x, pausing when it runs dry (an underrun) until the next token.
The stage sees this through an `InteractionView` publishing what the orchestrator
would (`PlaybackState(started, drained_at)`, NOT_STARTED between turns; no
downstream queue: this stage's output is the audio).

A turn appends the user's prompt and generates the reply. Some replies are cut by
a barge-in when playback reaches a drawn point: generation stops, the context is
truncated to the tokens heard (a token is heard once its audio has started) and
the rest is wasted (the cut is seen at the first round that starts after it, so a
token or so generated meanwhile counts too); the user speaks for the drawn gap,
then the next turn starts.
Otherwise the next turn starts a gap after the reply has played out. After its
last turn a session closes and frees its KV.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field

from kvtier import KVCacheManager, KVPoolConfig
from stages.config import SamplingParams, SchedulerConfig
from stages.interaction import InteractionView, PlaybackState
from stages.plan import RunnerOutput, SchedulerPlan
from stages.policies.urgency import UrgencyParams
from stages.requests import ThinkerRequest, TurnInput
from stages.scheduler import Scheduler

NOT_STARTED = PlaybackState(started=False, drained_at=0.0)
TOKEN = 7  # what the fake model samples
IDLE_TICK_S = 0.02  # how far the clock moves when a round plans nothing and no event is due sooner


@dataclass(frozen=True)
class Workload:
    """How sessions, turns, replies and barge-ins are drawn (ranges are inclusive, uniform
    unless said otherwise)."""

    num_sessions: int = 56
    arrival_window_s: float = 20.0         # sessions arrive uniformly over this window
    turns: tuple[int, int] = (2, 5)
    prompt_tokens: tuple[int, int] = (20, 100)
    reply_tokens: tuple[int, int] = (8, 120)  # log-uniform: many short replies, some long ones
    gap_s: tuple[float, float] = (0.5, 3.0)   # the user's pause or speech before the next turn
    barge_in_p: float = 0.3
    barge_at: tuple[float, float] = (0.1, 0.9)  # where playback is cut, as a fraction of the reply's audio
    audio_ms_per_token: float = 240.0       # tiny-omni: 3 codec frames of 80 ms per text token


@dataclass(frozen=True)
class StageModel:
    """The stage's budgets, KV pool and cost of a round: base + per_token * tokens in the batch."""

    max_num_seqs: int = 16
    max_num_batched_tokens: int = 128
    kv_blocks: int = 640
    block_size: int = 16
    step_base_s: float = 0.025
    step_per_token_s: float = 0.0015

    def step_s(self, plan: SchedulerPlan) -> float:
        return self.step_base_s + self.step_per_token_s * plan.num_tokens


@dataclass(frozen=True)
class Turn:
    prompt_tokens: int
    reply_tokens: int
    gap_s: float                   # before the next turn (after the reply played out or was cut)
    barge_at: float | None = None  # fraction of the reply's audio at which the user cuts in


@dataclass(frozen=True)
class SessionPlan:
    session_id: str
    arrival_s: float
    turns: tuple[Turn, ...]


def draw_sessions(workload: Workload, seed: int) -> list[SessionPlan]:
    """The same sessions for every policy given the seed (common random numbers)."""
    rng = random.Random(seed)
    low, high = workload.reply_tokens
    plans = []
    for i in range(workload.num_sessions):
        turns = tuple(Turn(
            prompt_tokens=rng.randint(*workload.prompt_tokens),
            reply_tokens=round(math.exp(rng.uniform(math.log(low), math.log(high)))),
            gap_s=rng.uniform(*workload.gap_s),
            barge_at=rng.uniform(*workload.barge_at) if rng.random() < workload.barge_in_p else None,
        ) for _ in range(rng.randint(*workload.turns)))
        plans.append(SessionPlan(f"s{i}", rng.uniform(0.0, workload.arrival_window_s), turns))
    return sorted(plans, key=lambda p: p.arrival_s)


@dataclass
class Reply:
    """One reply's generation and playback (a pausing player: it stalls when dry)."""

    turn: Turn
    started_at: float           # the turn's start (the user stopped speaking)
    context_tokens: int         # context before the reply (prompt included)
    ms_per_token: float
    num_generated: int = 0
    first_audio_at: float | None = None
    drained_at: float = 0.0     # when the delivered audio runs out
    stall_s: float = 0.0        # underrun: time the player waited for audio after first audio
    cut_at: float | None = None  # when playback reaches the barge-in point, once known
    ended_at: float | None = None
    num_wasted: int = 0

    @property
    def audio_ms(self) -> float:
        return self.num_generated * self.ms_per_token

    @property
    def barge_ms(self) -> float | None:
        return None if self.turn.barge_at is None else self.turn.barge_at * self.turn.reply_tokens * self.ms_per_token

    def deliver(self, now: float) -> None:
        """One more token's audio reaches the player at `now` (after a barge-in: generated, never played)."""
        if self.cut_at is not None and now >= self.cut_at:
            self.num_generated += 1
            return
        if self.first_audio_at is None:
            self.first_audio_at = self.drained_at = now
        elif now > self.drained_at:
            self.stall_s += now - self.drained_at
            self.drained_at = now
        self.drained_at += self.ms_per_token / 1000.0
        self.num_generated += 1

    def played_ms(self, now: float) -> float:
        return self.audio_ms - max(0.0, self.drained_at - now) * 1000.0 if self.first_audio_at is not None else 0.0

    def find_cut(self) -> bool:
        """Set `cut_at` once the audio delivered covers the barge-in point; True the first time."""
        barge_ms = self.barge_ms
        if self.cut_at is not None or barge_ms is None or self.audio_ms < barge_ms:
            return False
        self.cut_at = self.drained_at - (self.audio_ms - barge_ms) / 1000.0  # playback is continuous up to it
        return True

    @property
    def num_heard(self) -> int:
        """Tokens whose audio started playing by the end (all of them unless cut)."""
        if self.turn.barge_at is None:
            return self.num_generated
        return min(self.num_generated, math.ceil(self.barge_ms / self.ms_per_token))


class PlaybackView(InteractionView):
    """What the orchestrator would publish: each session's current reply, NOT_STARTED between turns."""

    def __init__(self) -> None:
        self.states: dict[str, PlaybackState] = {}

    def playback(self, request_id: str) -> PlaybackState | None:
        return self.states.get(request_id)


def fake_runner(kv: KVCacheManager, plan: SchedulerPlan) -> RunnerOutput:
    """Samples TOKEN where a chunk reaches the newest position of a generating request."""
    results = {}
    for chunk in plan.chunks:
        assert kv.table(chunk.request.request_id).num_tokens >= chunk.end, "KV reserved before the chunk runs"
        if chunk.request.wants_sample(chunk.end):
            results[chunk.request.request_id] = (TOKEN, None)
    return RunnerOutput(results)


@dataclass
class SimResult:
    replies: list[Reply] = field(default_factory=list)
    num_rounds: int = 0
    busy_s: float = 0.0
    idle_s: float = 0.0
    kv_occupancy_s: float = 0.0   # integral of occupancy over busy time
    num_computed: int = 0         # positions computed, recomputation included
    num_recomputed: int = 0       # positions computed again after preemption
    num_preemptions: int = 0
    num_active_preemptions: int = 0   # of those, requests with work pending (the rest sat idle between turns)
    num_active_recomputed: int = 0
    u2_samples: int = 0           # (request, round) pairs in U2 holding KV, and their two utility terms:
    u2_kv_term: float = 0.0       # sum of K * R_occ          (weighed by beta)
    u2_exposure_term: float = 0.0  # sum of (P - P_safe) / P_safe (weighed by alpha)
    num_failed: int = 0
    end_s: float = 0.0
    policy_counters: dict[str, int] = field(default_factory=dict)


class Simulation:
    """Runs one workload draw on one scheduler configuration to the last session's close."""

    def __init__(self, sessions: list[SessionPlan], workload: Workload, stage: StageModel,
                 scheduler: SchedulerConfig, max_sim_s: float = 3600.0) -> None:
        self.workload, self.stage, self.max_sim_s = workload, stage, max_sim_s
        self.now = 0.0
        self.kv = KVCacheManager(KVPoolConfig(num_blocks=stage.kv_blocks, block_size=stage.block_size,
                                              num_layers=1, num_kv_heads=1, head_dim=2))
        self.view = PlaybackView()
        self.scheduler = Scheduler(scheduler, self.kv, clock=lambda: self.now, view=self.view)
        self.result = SimResult()
        self.sessions = {p.session_id: p for p in sessions}
        self.requests: dict[str, ThinkerRequest] = {}
        self.turn_index: dict[str, int] = {}
        self.replies: dict[str, Reply] = {}
        self._events: list[tuple[float, int, str, str]] = []  # (time, tie-break, kind, session id)
        self._num_events = 0
        for plan in sessions:
            self._at(plan.arrival_s, "turn", plan.session_id)

    def _at(self, time: float, kind: str, session_id: str) -> None:
        heapq.heappush(self._events, (time, self._num_events, kind, session_id))
        self._num_events += 1

    def run(self) -> SimResult:
        result = self.result
        while self._events or self.scheduler.requests:
            if self.now > self.max_sim_s:
                raise RuntimeError(f"simulation passed {self.max_sim_s} s: the stage never drains")
            self._fire_due_events()
            before = {rid: (r.num_computed, r.num_pending > 0) for rid, r in self.scheduler.requests.items()}
            self._sample_u2_terms()
            plan = self.scheduler.schedule()
            self._count_preempted(plan, before)
            if not plan.chunks:
                self._idle()
                continue
            step = self.stage.step_s(plan)
            result.num_rounds += 1
            result.busy_s += step
            result.kv_occupancy_s += self.kv.occupancy * step
            result.num_computed += plan.num_tokens
            self.now += step
            for output in self.scheduler.update_from_output(plan, fake_runner(self.kv, plan)):
                if output.error is not None:
                    result.num_failed += 1
                elif output.payload is not None:
                    self._token(output.request_id)
        result.num_preemptions = self.scheduler.num_preemptions
        result.end_s = self.now
        result.policy_counters = self.scheduler.policy.counters
        return result

    def _count_preempted(self, plan: SchedulerPlan, before: dict[str, tuple[int, bool]]) -> None:
        for request_id in plan.preempted:
            computed, active = before.get(request_id, (0, False))
            self.result.num_recomputed += computed
            if active:
                self.result.num_active_preemptions += 1
                self.result.num_active_recomputed += computed

    def _sample_u2_terms(self) -> None:
        """The two terms of U for every ready, KV-holding request the urgency policy would put in U2."""
        params = self.scheduler.config.params
        if not isinstance(params, UrgencyParams):  # fcfs: where the urgency policy's defaults would put them
            params = UrgencyParams()
        occupancy, result = self.kv.occupancy, self.result
        for request_id, request in self.scheduler.requests.items():
            state = self.view.states.get(request_id)
            if request.num_pending == 0 or state is None or not state.started:
                continue
            buffer_ms = state.buffer_ms(self.now)
            blocks = self.kv.num_blocks_held(request_id)
            if params.p_safe_ms < buffer_ms < params.p_max_ms and blocks:
                result.u2_samples += 1
                result.u2_kv_term += blocks * occupancy
                result.u2_exposure_term += (buffer_ms - params.p_safe_ms) / params.p_safe_ms

    def _idle(self) -> None:
        """Nothing to run: move to the next event, or a tick on if work is ready (buffers drain meanwhile)."""
        target = self._events[0][0] if self._events else math.inf
        if self.scheduler.num_ready:
            target = min(target, self.now + IDLE_TICK_S)
        if target == math.inf:
            if self.scheduler.requests:
                raise RuntimeError("requests are left but nothing is ready and no event is due")
            return  # the last sessions were just reaped
        self.result.idle_s += max(0.0, target - self.now)
        self.now = max(self.now, target)

    def _fire_due_events(self) -> None:
        while self._events and self._events[0][0] <= self.now:
            at, _, kind, session_id = heapq.heappop(self._events)
            {"turn": self._start_turn, "end": self._end_reply, "barge": self._barge_in}[kind](session_id, at)

    def _start_turn(self, session_id: str, at: float) -> None:
        plan, index = self.sessions[session_id], self.turn_index.get(session_id, 0)
        turn = plan.turns[index]
        request = self.requests.get(session_id)
        if request is None:
            request = self.requests[session_id] = ThinkerRequest(session_id, at, frozenset(), 10**9)
            self.scheduler.add(request)
        sampling = SamplingParams(temperature=0.0, max_tokens=turn.reply_tokens, ignore_eos=True)
        request.append(TurnInput([1] * turn.prompt_tokens, sampling=sampling))
        self.replies[session_id] = Reply(turn, at, request.num_known, self.workload.audio_ms_per_token)
        self.view.states[session_id] = NOT_STARTED

    def _token(self, session_id: str) -> None:
        reply = self.replies[session_id]
        reply.deliver(self.now)
        self.view.states[session_id] = PlaybackState(True, reply.drained_at)
        if reply.find_cut():
            self._at(reply.cut_at, "barge", session_id)
        elif reply.turn.barge_at is None and reply.num_generated == reply.turn.reply_tokens:
            self._at(reply.drained_at, "end", session_id)

    def _barge_in(self, session_id: str, at: float) -> None:
        """The user cuts in: stop, keep what was heard, count the rest as wasted (as StopGeneration does)."""
        reply, request = self.replies[session_id], self.requests[session_id]
        request.stop_generation()
        keep = reply.context_tokens + reply.num_heard
        request.truncate(keep)
        self.kv.truncate(session_id, keep)
        reply.num_wasted = reply.num_generated - reply.num_heard
        self._end_reply(session_id, at)

    def _end_reply(self, session_id: str, at: float) -> None:
        reply = self.replies[session_id]
        reply.ended_at = at
        self.result.replies.append(reply)
        self.view.states[session_id] = NOT_STARTED
        index = self.turn_index[session_id] = self.turn_index.get(session_id, 0) + 1
        if index < len(self.sessions[session_id].turns):
            self._at(at + reply.turn.gap_s, "turn", session_id)
        else:
            self.requests[session_id].append(None, close=True)

