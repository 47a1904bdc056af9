"""The scheduler over a two-tier KV pool: dormant sessions move to the host instead of being
recomputed, come back on their next turn (waiting on the critical path, or preloaded off it),
and the KV they come back with is the KV they left with (over 300 lines: each path a session's KV
takes between the tiers, on one fixture)."""

from __future__ import annotations

import pytest
import torch

from kvtier import HostTierConfig, KVCacheManager, KVPoolConfig
from stages.config import SamplingParams, SchedulerConfig
from stages.interaction import InteractionView, PlaybackState
from stages.kv_residency import RESUME_LEAD_S, KVResidency
from stages.plan import RunnerOutput, SchedulerPlan
from stages.policies.urgency import UrgencyParams
from stages.requests import TurnInput
from stages.requests.talker import TalkerRequest
from stages.runners.base import ModelRunner
from stages.scheduler import Scheduler
from tests.stages.scheduler_harness import FakeClock, thinker

BLOCK = 4


class KVWritingRunner(ModelRunner):
    """Writes a number naming (request, position, token) into the real KV tensors, and before
    every chunk reads the whole context back: KV lost or mixed up in a tier move fails here."""

    def __init__(self, kv: KVCacheManager) -> None:
        self.kv = kv
        self.keys = kv.cache.layer(0)[0].view(-1)

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        results = {}
        for chunk in plan.chunks:
            seq, request = chunk.request.request_id, chunk.request
            slots = self.kv.slot_ids(seq, 0, chunk.end)
            expected = [self._code(seq, p, request.token_ids[p]) for p in range(chunk.start)]
            assert self.keys[slots[: chunk.start]].tolist() == expected, f"{seq}: KV lost in a tier move"
            self.keys[slots[chunk.start:]] = torch.tensor(
                [self._code(seq, p, request.token_ids[p]) for p in range(chunk.start, chunk.end)])
            if request.wants_sample(chunk.end):
                results[seq] = (3 + chunk.end % 50, torch.zeros(1))
        return RunnerOutput(results)

    @staticmethod
    def _code(seq: str, position: int, token: int) -> float:
        return float(ord(seq[-1]) * 100_000 + position * 100 + token)


class NextUseView(InteractionView):
    def __init__(self) -> None:
        self.next_use_at: dict[str, float] = {}

    def playback(self, request_id: str) -> PlaybackState | None:
        return None

    def next_use(self, request_id: str) -> float | None:
        return self.next_use_at.get(request_id)


def make(eviction: str, num_blocks: int, preload: bool = False, view: InteractionView | None = None,
         idle_offload_s: float | None = None, preload_at: str = "pause", host_blocks: int | None = None,
         **scheduler_config):
    clock = FakeClock()
    config = KVPoolConfig(num_blocks=num_blocks, num_layers=1, num_kv_heads=1, head_dim=1, block_size=BLOCK)
    host = None if eviction == "none" else HostTierConfig(host_blocks or 4 * num_blocks)
    kv = KVCacheManager(config, host, eviction, clock, transfer_mode="inline" if host else "thread")
    residency = KVResidency(kv, view, preload, protect_speaking=eviction == "next_use", idle_offload_s=idle_offload_s,
                            preload_at=preload_at)
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, **scheduler_config), kv, clock,
                          view, residency)
    return scheduler, KVWritingRunner(kv), kv, clock


def run(scheduler: Scheduler, runner: KVWritingRunner, kv: KVCacheManager, rounds: int = 40) -> list:
    """Rounds until nothing is ready, copying whatever transfers are queued after each one."""
    plans = []
    for _ in range(rounds):
        plan = scheduler.schedule()
        scheduler.check_integrity()
        scheduler.update_from_output(plan, runner.execute(plan) if plan.chunks else RunnerOutput({}))
        scheduler.check_integrity()
        plans.append(plan)
        if kv.tier.worker is not None:
            kv.tier.worker.run_all()
        if scheduler.num_ready == 0 and not kv.tier.has_transfers_in_flight:
            scheduler.schedule()  # completes the last transfers
            break
    return plans


def next_turn(scheduler: Scheduler, seq: str, tokens: list[int], max_tokens: int = 2) -> None:
    request = scheduler.requests[seq]
    request.append(TurnInput(tokens, sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens)))


def three_sessions(scheduler: Scheduler, runner, kv) -> None:
    """a, b, c each run a first turn of 10 + 2 tokens (3 blocks each) and go dormant."""
    for seq in "abc":
        scheduler.add(thinker(f"s/{seq}", 0.0, list(range(1, 11)), max_tokens=2, close=False))
    run(scheduler, runner, kv)


@pytest.mark.parametrize("eviction", ["lru", "next_use"])
def test_pressure_moves_dormant_sessions_to_the_host_instead_of_recomputing(eviction):
    scheduler, runner, kv, clock = make(eviction, num_blocks=12)
    three_sessions(scheduler, runner, kv)
    assert kv.num_used_blocks == 9 and kv.tier.stats["stores_bytes"] > 0  # dormant, and written back
    scheduler.add(thinker("s/d", 1.0, list(range(1, 21)), max_tokens=2, close=False))  # needs 6 blocks: 3 free
    run(scheduler, runner, kv)
    assert scheduler.num_preemptions == 0
    offloaded = [seq for seq in ("s/a", "s/b", "s/c") if kv.num_offloaded_blocks(seq)]
    assert offloaded and kv.tier.stats["evictions"] >= 3
    victim = offloaded[0]
    clock.t = 2.0
    next_turn(scheduler, victim, [7, 8])  # its next turn: the KV comes back before anything runs
    plans = run(scheduler, runner, kv)
    assert kv.is_resident(victim) and kv.num_offloaded_blocks(victim) == 0
    assert any(c.request.request_id == victim for p in plans for c in p.chunks)  # ran on the reloaded KV
    assert scheduler.residency.counters.loaded_bytes > 0 and scheduler.num_preemptions == 0


def test_without_a_host_tier_pressure_preempts_and_recomputes():
    scheduler, runner, kv, _ = make("none", num_blocks=12)
    three_sessions(scheduler, runner, kv)
    scheduler.add(thinker("s/d", 1.0, list(range(1, 21)), max_tokens=2, close=False))
    run(scheduler, runner, kv)
    assert kv.tier.link_gbps is None and scheduler.num_preemptions >= 1
    dropped = [seq for seq in ("s/a", "s/b", "s/c") if kv.num_blocks_held(seq) == 0]
    assert dropped and all(scheduler.requests[seq].num_computed == 0 for seq in dropped)  # to be recomputed


def test_next_use_evicts_the_session_needed_last_and_lru_the_one_idle_longest():
    victims = {}
    for eviction in ("lru", "next_use"):
        view = NextUseView()
        scheduler, runner, kv, clock = make(eviction, num_blocks=12, view=view)
        three_sessions(scheduler, runner, kv)  # a went dormant first: LRU's victim
        view.next_use_at.update({"s/a": 3.0, "s/b": 50.0, "s/c": 9.0})  # b's user listens longest
        scheduler.add(thinker("s/d", 1.0, list(range(1, 13)), max_tokens=1, close=False))  # 4 blocks: 1 short
        run(scheduler, runner, kv)
        victims[eviction] = [seq for seq in ("s/a", "s/b", "s/c") if kv.num_offloaded_blocks(seq)]
    assert victims == {"lru": ["s/a"], "next_use": ["s/b"]}


def test_a_turn_whose_kv_is_away_waits_for_the_load_on_the_critical_path():
    view = NextUseView()
    scheduler, runner, kv, clock = make("next_use", num_blocks=12, view=view)
    three_sessions(scheduler, runner, kv)
    view.next_use_at.update({"s/a": 50.0, "s/b": 3.0, "s/c": 9.0})
    scheduler.add(thinker("s/d", 1.0, list(range(1, 21)), max_tokens=2, close=False))
    run(scheduler, runner, kv)
    assert kv.num_offloaded_blocks("s/a") == 3
    clock.t = 2.0
    next_turn(scheduler, "s/a", [7, 8])
    plan = scheduler.schedule()  # starts the load; a waits
    assert "s/a" not in [c.request.request_id for c in plan.chunks] and scheduler.is_waiting_on_kv
    scheduler.update_from_output(plan, runner.execute(plan) if plan.chunks else RunnerOutput({}))
    clock.t = 2.25  # the copy takes a while
    kv.tier.worker.run_all()
    run(scheduler, runner, kv)
    assert scheduler.residency.counters.critical_s == pytest.approx(0.25)
    assert scheduler.residency.counters.background_s == pytest.approx(0.0, abs=0.01)


def a_offloaded_with_room_to_return(scheduler: Scheduler, runner: KVWritingRunner, kv: KVCacheManager,
                                    view: NextUseView) -> None:
    """a, b, c go dormant; d's prompt pushes a (needed last) to the host; d then leaves, so a has room to come back."""
    three_sessions(scheduler, runner, kv)
    view.next_use_at.update({"s/a": 50.0, "s/b": 3.0, "s/c": 9.0})
    scheduler.add(thinker("s/d", 1.0, list(range(1, 21)), max_tokens=2, close=False))
    run(scheduler, runner, kv)
    scheduler.abort("s/d")


def test_speech_preloads_offloaded_kv_off_the_critical_path_and_the_turn_hits_it():
    view = NextUseView()
    scheduler, runner, kv, clock = make("next_use", num_blocks=12, preload=True, view=view, preload_at="speech_start")
    a_offloaded_with_room_to_return(scheduler, runner, kv, view)
    assert kv.num_offloaded_blocks("s/a") == 3
    clock.t = 2.0
    scheduler.speech_started("s/a", lead_s=1.5)
    assert kv.tier.stats["preloads_admitted"] == 1
    kv.tier.worker.run_all()
    scheduler.schedule()  # completes the preload
    assert kv.is_resident("s/a")
    clock.t = 3.5
    next_turn(scheduler, "s/a", [7, 8])
    run(scheduler, runner, kv)
    assert kv.tier.stats["preloads_hit"] == 1
    assert scheduler.residency.counters.critical_s == 0.0 and scheduler.residency.counters.loaded_bytes > 0


def test_preload_at_pause_leaves_a_speaking_users_kv_away_until_they_go_quiet():
    view = NextUseView()
    scheduler, runner, kv, clock = make("next_use", num_blocks=12, preload=True, view=view)
    a_offloaded_with_room_to_return(scheduler, runner, kv, view)
    clock.t = 2.0
    scheduler.speech_started("s/a", lead_s=1.5)  # speaking: protected, but nothing loads yet
    kv.tier.worker.run_all()
    scheduler.schedule()
    assert kv.num_offloaded_blocks("s/a") == 3 and kv.tier.stats["preloads_admitted"] == 0
    clock.t = 3.0
    scheduler.speech_paused("s/a", lead_s=0.25)  # quiet: the turn is a quarter of a second away
    assert kv.tier.stats["preloads_admitted"] == 1
    kv.tier.worker.run_all()
    scheduler.schedule()
    assert kv.is_resident("s/a")
    clock.t = 3.25
    next_turn(scheduler, "s/a", [7, 8])
    run(scheduler, runner, kv)
    assert kv.tier.stats["preloads_hit"] == 1 and scheduler.residency.counters.critical_s == 0.0


def test_a_context_comes_back_before_its_predicted_next_use_into_free_room():
    # a session that writes gives no speech to preload at: its predicted next use is the signal
    view = NextUseView()
    scheduler, runner, kv, clock = make("next_use", num_blocks=12, preload=True, view=view)
    a_offloaded_with_room_to_return(scheduler, runner, kv, view)  # a next used at 50 s; 6 blocks free
    clock.t = 48.0
    scheduler.schedule()  # 2 s away: beyond the lead, a stays on the host
    assert kv.num_offloaded_blocks("s/a") == 3 and kv.tier.stats["preloads_admitted"] == 0
    clock.t = 49.2
    scheduler.schedule()  # within PREDICTED_LEAD_S: a background load, tried once
    clock.t = 49.4
    scheduler.schedule()
    assert kv.tier.stats["preloads_admitted"] == 1
    kv.tier.worker.run_all()
    clock.t = 49.6
    scheduler.schedule()
    assert kv.is_resident("s/a")
    clock.t = 50.0
    next_turn(scheduler, "s/a", [7, 8])
    run(scheduler, runner, kv)
    assert kv.tier.stats["preloads_hit"] == 1 and scheduler.residency.counters.critical_s == 0.0


def test_a_predicted_preload_takes_only_free_room_beyond_the_reserve():
    view = NextUseView()
    scheduler, runner, kv, clock = make("next_use", num_blocks=12, preload=True, view=view)
    a_offloaded_with_room_to_return(scheduler, runner, kv, view)
    scheduler.add(thinker("s/e", 40.0, list(range(1, 10)), max_tokens=2, close=False))  # 3 more blocks held: 3 free
    run(scheduler, runner, kv)
    view.next_use_at["s/e"] = 60.0
    clock.t = 49.5
    scheduler.schedule()  # a's 3 blocks would leave no free block (the reserve is 1.2): a waits for its turn
    assert kv.num_offloaded_blocks("s/a") == 3
    stats = kv.tier.stats
    assert stats["preloads_admitted"] == stats["preloads_no_room"] == 0  # nothing tried, nothing evicted
    assert kv.num_offloaded_blocks("s/e") == 0


def test_preload_at_speech_start_ignores_pauses():
    view = NextUseView()
    scheduler, runner, kv, clock = make("next_use", num_blocks=12, preload=True, view=view, preload_at="speech_start")
    a_offloaded_with_room_to_return(scheduler, runner, kv, view)
    scheduler.speech_paused("s/a", lead_s=0.25)
    assert kv.num_offloaded_blocks("s/a") == 3 and kv.tier.stats["preloads_admitted"] == 0


def test_an_unknown_preload_trigger_is_refused_by_name():
    with pytest.raises(ValueError, match="preload_at must be one of"):
        make("next_use", num_blocks=12, preload=True, preload_at="speech_end")


def test_dormant_kv_not_needed_soon_leaves_the_device_without_pressure():
    view = NextUseView()
    scheduler, runner, kv, clock = make("next_use", num_blocks=40, preload=True, view=view, idle_offload_s=5.0)
    view.next_use_at.update({"s/a": 50.0, "s/b": 3.0, "s/c": 9.0})
    three_sessions(scheduler, runner, kv)
    clock.t = 1.0
    scheduler.schedule()  # the sweep: a and c are needed more than 5 s from now, b is not
    assert [kv.num_offloaded_blocks(s) for s in ("s/a", "s/b", "s/c")] == [3, 0, 3]
    assert kv.num_used_blocks == 3 and scheduler.num_preemptions == 0
    scheduler.speech_started("s/c", lead_s=2.0)  # c's user speaks, then goes quiet: c comes back off the
    scheduler.speech_paused("s/c", lead_s=0.25)  # critical path
    kv.tier.worker.run_all()
    clock.t = 1.05
    scheduler.schedule()
    assert kv.is_resident("s/c") and not kv.is_resident("s/a")


class PlayingView(NextUseView):
    """Playback telemetry set by the test: `play(seq, ms)` is `ms` of audio left to hear from now on."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.states: dict[str, PlaybackState] = {}

    def playback(self, request_id: str) -> PlaybackState | None:
        return self.states.get(request_id)

    def play(self, request_id: str, buffer_ms: float) -> None:
        self.states[request_id] = PlaybackState(started=True, drained_at=self.clock.t + buffer_ms / 1000.0)


def one_round(scheduler: Scheduler, runner: KVWritingRunner, kv: KVCacheManager) -> SchedulerPlan:
    plan = scheduler.schedule()
    scheduler.check_integrity()
    scheduler.update_from_output(plan, runner.execute(plan) if plan.chunks else RunnerOutput({}))
    scheduler.check_integrity()
    if kv.tier.worker is not None:
        kv.tier.worker.run_all()
    return plan


def test_a_reply_paced_in_bursts_leaves_the_device_while_held_and_is_back_before_it_resumes():
    clock = FakeClock()
    view = PlayingView(clock)
    scheduler, runner, kv, _ = make("next_use", num_blocks=12, preload=True, view=view, idle_offload_s=1.0,
                                    policy="urgency", params=UrgencyParams(p_resume_ms=600.0))
    scheduler.clock = kv.clock = clock
    scheduler.add(thinker("s/a", 0.0, list(range(1, 11)), max_tokens=30, close=False))
    for _ in range(3):  # no telemetry yet: served as first audio (prefill, then two tokens)
        assert one_round(scheduler, runner, kv).chunks
    held_blocks = kv.num_blocks_held("s/a")
    view.play("s/a", 2500.0)  # 2.5 s buffered: held until 0.6 s are left, 1.9 s from now
    assert not one_round(scheduler, runner, kv).chunks and kv.is_resident("s/a")
    clock.t = 0.2
    assert not one_round(scheduler, runner, kv).chunks  # next use 1.7 s away, beyond the 1 s idle horizon
    assert kv.num_offloaded_blocks("s/a") == held_blocks and kv.num_used_blocks == 0
    clock.t = 1.9 - RESUME_LEAD_S + 0.05
    for _ in range(2):  # the load starts, then completes; still held (P = 0.85 s)
        assert not one_round(scheduler, runner, kv).chunks
    assert kv.is_resident("s/a") and kv.num_blocks_held("s/a") == held_blocks
    clock.t = 1.95  # P = 0.55 s: under p_resume, a burst runs on the KV it left with
    assert [c.request.request_id for c in one_round(scheduler, runner, kv).chunks] == ["s/a"]
    assert scheduler.residency.counters.critical_s == 0.0 and kv.tier.stats["preloads_hit"] == 1
    assert scheduler.num_preemptions == 0


class FrameRunner(ModelRunner):
    """Samples a codec frame for every chunk that ends at a talker request's newest position."""

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        return RunnerOutput({chunk.request.request_id: (chunk.end % 50, torch.zeros(1))
                             for chunk in plan.chunks if chunk.request.wants_sample(chunk.end)})


def talker_turn(request_id: str, num_states: int) -> TalkerRequest:
    """A talker request with `num_states` of the thinker's states come in, its turn still open."""
    request = TalkerRequest(request_id, 0.0, 1, SamplingParams(temperature=0.0), bos_id=0)
    request.append(torch.zeros(num_states, 2))
    return request


@pytest.mark.parametrize("eviction", ["lru", "next_use"])
def test_under_pressure_kv_idle_mid_turn_goes_to_the_host_rather_than_being_recomputed(eviction):
    scheduler, _, kv, _ = make(eviction, num_blocks=12)
    runner, waiting = FrameRunner(), talker_turn("t/a", 44)
    scheduler.add(waiting)
    run(scheduler, runner, kv, rounds=100)
    assert kv.num_used_blocks == 11 and waiting.num_pending == 0  # 44 frames: it waits for the thinker's next state
    scheduler.add(talker_turn("t/b", 12))  # three blocks, one free
    run(scheduler, runner, kv, rounds=100)
    assert scheduler.num_preemptions == 0 and kv.num_offloaded_blocks("t/a") == 2
    waiting.append(torch.zeros(1, 2))  # its next state: the KV comes back, nothing recomputed
    run(scheduler, runner, kv, rounds=100)
    assert scheduler.num_preemptions == 0 and kv.is_resident("t/a") and waiting.num_computed == 45


def test_with_room_kv_idle_mid_turn_stays_in_use():
    scheduler, _, kv, _ = make("next_use", num_blocks=16)
    scheduler.add(talker_turn("t/a", 44))  # 11 of 16 blocks: under the share where idle KV may leave
    run(scheduler, FrameRunner(), kv, rounds=100)
    assert kv.tier.stats["stores_bytes"] == 0
