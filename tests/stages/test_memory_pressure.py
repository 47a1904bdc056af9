"""The memory-pressure storm in miniature, on the fake clock: each mechanism found in the replays
(benchmarks/memory_pressure.py) reproduced, and shown gone.

- Urgency paces replies to playback, so a generating context stays active for its reply's whole
  playback. A new turn found no dormant KV to offload and preempted a paced (held) context, which
  recomputed its whole conversation when it resumed. Now a held context publishes when it resumes and
  its KV is an eviction candidate like a dormant one's: it goes to the host and comes back in time.
- A context whose KV was on the host, with no room to load it, was preempted to recompute (needing
  the same room); now it waits for room. Protected KV (a speaking user's, a preload's) made active
  requests recompute rather than leave; now protections lift first.
- With the host tier full, write-backs are skipped, so dormant contexts can no longer leave the device
  and a load found no room for as long as nobody needed a chunk (seconds, the stage idle); now a load
  takes room from idle contexts, which recompute at their next turn (test_scheduler.py: a context
  preempted between turns used to recompute at once, at top priority, and take room again).
"""
from __future__ import annotations

import math

import pytest

from stages.policies.urgency import UrgencyParams
from stages.requests import RequestStatus
from tests.stages.scheduler_harness import FakeClock, thinker
from tests.stages.test_kv_residency import (
    NextUseView,
    PlayingView,
    a_offloaded_with_room_to_return,
    make,
    next_turn,
    one_round,
    run,
    three_sessions,
)


def paced_pair_and_a_new_turn(eviction: str):
    """Pool of 12 blocks (4 tokens). c's first turn leaves 2 blocks dormant; a and b each hold a 16-token
    context (4 blocks) and are speaking replies with 2.5 s buffered (urgency holds them); then c's next
    turn needs 5 blocks with 2 free."""
    clock = FakeClock()
    view = PlayingView(clock)
    scheduler, runner, kv, _ = make(eviction, num_blocks=12, preload=True, view=view, policy="urgency",
                                    params=UrgencyParams(pace_kv_share=math.inf))  # paced, however short the pool
    scheduler.clock = kv.clock = clock
    scheduler.add(thinker("s/c", 0.0, [1, 2, 3], max_tokens=2, close=False))
    for seq in "ab":
        scheduler.add(thinker(f"s/{seq}", 0.0, list(range(1, 15)), max_tokens=30, close=False))
    for _ in range(3):  # prefill, then a token each: first audio out, and c's reply done
        one_round(scheduler, runner, kv)
    for seq in "ab":
        view.play(f"s/{seq}", 2500.0)  # far ahead of the listener: held until under p_max (2 s)
    one_round(scheduler, runner, kv)
    held = {seq: scheduler.requests[seq].num_computed for seq in ("s/a", "s/b")}
    assert kv.num_free_blocks == 2
    next_turn(scheduler, "s/c", list(range(1, 13)))
    for _ in range(4):
        one_round(scheduler, runner, kv)
    return scheduler, runner, kv, clock, view, held


def test_without_a_host_tier_the_new_turn_preempts_a_paced_context_which_recomputes():
    scheduler, _, kv, _, _, held = paced_pair_and_a_new_turn("none")
    assert scheduler.num_preemptions >= 1  # the mechanism of the storm
    assert any(scheduler.requests[seq].num_computed < held[seq] for seq in held)  # back to recompute


def test_with_a_host_tier_a_paced_context_goes_to_the_host_instead_and_resumes_on_its_own_kv():
    scheduler, runner, kv, clock, view, held = paced_pair_and_a_new_turn("next_use")
    assert scheduler.num_preemptions == 0
    assert scheduler.requests["s/c"].num_computed >= 17  # the new turn ran
    offloaded = [seq for seq in held if kv.num_offloaded_blocks(seq)]
    assert offloaded  # the room came from a held context's KV, written back and evicted
    clock.t = 0.7  # playback drained under p_max: the held contexts resume on the KV they left with
    for seq in held:
        view.play(seq, 1500.0)
    for _ in range(6):
        one_round(scheduler, runner, kv)
    assert scheduler.num_preemptions == 0
    assert all(scheduler.requests[seq].num_computed > held[seq] for seq in held)  # generating again, no recompute
    assert all(kv.is_resident(seq) for seq in held)


def test_a_preload_leaves_the_reserve_free_for_what_runs():
    view = NextUseView()
    scheduler, runner, kv, clock = make("next_use", num_blocks=12, preload=True, view=view)
    a_offloaded_with_room_to_return(scheduler, runner, kv, view)  # a's 3 blocks on the host, 6 free
    scheduler.add(thinker("s/e", 1.5, list(range(1, 10)), max_tokens=2, close=False))
    run(scheduler, runner, kv)  # e's reply done: 3 blocks more held, 3 free; a needs 3 and the reserve is 1
    view.next_use_at["s/e"] = 60.0
    clock.t = 2.0
    scheduler.schedule()  # the sweep publishes e's next use
    outcome = scheduler.residency.speech_paused("s/a", 0.25, clock())
    assert outcome == "admitted" and kv.num_offloaded_blocks("s/e") > 0  # e, needed later, made room
    assert kv.num_free_blocks >= 1  # and the reserve stayed free


def test_a_context_on_the_host_with_no_room_to_load_waits_for_room_instead_of_recomputing():
    view = NextUseView()
    scheduler, runner, kv, clock = make("next_use", num_blocks=12, view=view)
    a_offloaded_with_room_to_return(scheduler, runner, kv, view)  # a's 12 positions on the host
    scheduler.add(thinker("s/e", 1.0, list(range(1, 13)), max_tokens=6, close=False))
    for seq in ("s/b", "s/c"):
        next_turn(scheduler, seq, [7, 8, 9, 10], max_tokens=6)  # b and c decode replies that fill the pool
    one_round(scheduler, runner, kv)
    next_turn(scheduler, "s/a", [7, 8])
    computed = []
    for _ in range(12):
        one_round(scheduler, runner, kv)  # the runner checks every context it reads against what was written
        computed.append(scheduler.requests["s/a"].num_computed)
    assert scheduler.residency.counters.load_waits > 0  # no room at first: a waited
    assert min(computed) == 12 and computed[-1] > 14  # never back to 0: it ran on the KV it left with


def test_protected_kv_leaves_for_the_host_before_anything_is_preempted():
    view = NextUseView()
    scheduler, runner, kv, clock = make("next_use", num_blocks=12, view=view)
    three_sessions(scheduler, runner, kv)  # 9 blocks dormant, written back
    for seq in ("s/a", "s/b", "s/c"):
        scheduler.speech_started(seq, lead_s=10.0)  # every user speaks: all of it protected
    scheduler.add(thinker("s/d", 1.0, list(range(1, 21)), max_tokens=2, close=False))  # needs 6 blocks: 3 free
    run(scheduler, runner, kv)
    assert scheduler.num_preemptions == 0 and scheduler.residency.counters.protections_lifted >= 1
    assert sum(kv.num_offloaded_blocks(seq) for seq in ("s/a", "s/b", "s/c")) >= 3


@pytest.mark.parametrize("eviction", ["lru", "next_use"])
def test_with_the_host_full_a_load_takes_room_from_an_idle_context_instead_of_waiting_forever(eviction):
    scheduler, runner, kv, clock = make(eviction, num_blocks=12, host_blocks=3)
    three_sessions(scheduler, runner, kv)  # 9 blocks dormant; the host holds one session's copy at a time
    scheduler.add(thinker("s/d", 1.0, list(range(1, 21)), max_tokens=2, close=False))  # 6 blocks: 3 free
    run(scheduler, runner, kv)
    away = [seq for seq in ("s/a", "s/b", "s/c") if kv.num_offloaded_blocks(seq)]
    assert len(away) == 1 and kv.num_free_blocks == 0  # one session on the host, its only copy
    assert kv.tier.stats["stores_skipped"] >= 1  # d's write-back found the host full: d cannot leave
    next_turn(scheduler, away[0], [7, 8])
    run(scheduler, runner, kv)
    request = scheduler.requests[away[0]]
    assert request.num_computed == 16 and kv.is_resident(away[0])  # its turn ran (on the KV it left with:
    # the runner checks)
    assert scheduler.residency.counters.load_waits >= 1  # no room to load at first
    victims = [r for r in scheduler.requests.values() if r.status is RequestStatus.WAITING]
    assert len(victims) == scheduler.num_preemptions == 2  # room to load, then to grow, from the idle a and b
    assert all(r.request_id != "s/d" and r.num_pending == 0 for r in victims)  # they recompute at their next turn
