"""The urgency policy: classes U0/U1/U2, utility order, holding past P_max, fallbacks; and fcfs on the same scenes
(over 300 lines: one scene per rule of the policy, each also played under fcfs)."""

import math

import pytest

from stages.config import SamplingParams, SchedulerConfig
from stages.engine import StageEngine
from stages.factory import build_engine
from stages.interaction import InteractionView, PlaybackState
from stages.models.decoder_config import DecoderConfig
from stages.policies import make_policy
from stages.policies.fcfs import FCFSParams
from stages.policies.urgency import UrgencyParams
from stages.requests import RequestStatus, TurnInput
from stages.scheduler import Scheduler
from stages.shared_device import SharedDevice
from stages.stage_spec import KVSpec, StageSpec
from tests.stages.scheduler_harness import BLOCK, FakeClock, chunks_of, make_kv, make_scheduler, step, thinker

NOT_STARTED = PlaybackState(started=False, drained_at=0.0)


def playing(buffer_ms: float) -> PlaybackState:
    """A started reply with `buffer_ms` of audio queued downstream (nothing left to drain: P = buffer_ms)."""
    return PlaybackState(started=True, drained_at=0.0, queued_ms=buffer_ms)


class FakeView(InteractionView):
    """Telemetry a test sets per request id; ids it does not know have none."""

    def __init__(self, **states: PlaybackState) -> None:
        self.states = states

    def playback(self, request_id: str) -> PlaybackState | None:
        return self.states.get(request_id)


def ready(rid: str, arrival: float, since: float):
    """A thinker request with pending work, marked ready since `since` (what the scheduler stamps)."""
    request = thinker(rid, arrival, [1, 2, 3], max_tokens=1)
    request.ready_since = since
    return request


def urgency(view: InteractionView | None, kv=None, **params):
    return make_policy(SchedulerConfig(policy="urgency", params=UrgencyParams(**params)), view, kv)


def ids(requests) -> list[str]:
    return [r.request_id for r in requests]


# ---------------------------------------------------------------- configuration

@pytest.mark.parametrize("field, value, message", [
    ("p_safe_ms", 0, "p_safe_ms must be a finite number > 0, got 0"),
    ("p_safe_ms", math.inf, "p_safe_ms must be a finite number > 0, got inf"),
    ("p_safe_ms", True, "p_safe_ms must be a finite number > 0, got True"),
    ("p_max_ms", 400, "p_max_ms must be a number > p_safe_ms (400.0), got 400"),
    ("p_max_ms", math.nan, "p_max_ms must be a number > p_safe_ms (400.0), got nan"),
    ("p_yield_ms", 399, "p_yield_ms must be a number > p_safe_ms (400.0), got 399"),
    ("p_yield_ms", "1s", "p_yield_ms must be a number > p_safe_ms (400.0), got '1s'"),
    ("alpha", -0.5, "alpha must be a finite number >= 0, got -0.5"),
    ("beta", math.inf, "beta must be a finite number >= 0, got inf"),
    ("beta", "1", "beta must be a finite number >= 0, got '1'"),
    ("u1_ms_per_position", -1, "u1_ms_per_position must be a finite number >= 0, got -1"),
    ("pace_kv_share", 0, "pace_kv_share must be a number > 0 (.inf: pace whatever the pool), got 0"),
    ("prefill_patience_ms", -1, "prefill_patience_ms must be a number >= 0 (.inf: wait while any decodes), got -1"),
    ("first_audio_gate_ms", -1, "first_audio_gate_ms must be a number >= 0 (.inf: no bound), got -1"),
    ("gate_buffer_ms", 401, "gate_buffer_ms must be a number between 0 and p_safe_ms (400.0), got 401"),
    ("at_risk_prefill_tokens", 0, "at_risk_prefill_tokens must be a positive integer, got 0"),
    ("at_risk_prefill_tokens", 64.0, "at_risk_prefill_tokens must be a positive integer, got 64.0"),
    ("p_resume_ms", 400, "p_resume_ms must be a number between p_safe_ms (400.0) and p_max_ms (2000.0), or null, got 400"),
    ("p_resume_ms", 2000, "p_resume_ms must be a number between p_safe_ms (400.0) and p_max_ms (2000.0), or null, got 2000"),
])
def test_urgency_parameters_are_validated_by_name(field, value, message):
    with pytest.raises(ValueError) as error:
        UrgencyParams(**{field: value})
    assert str(error.value) == message


def test_urgency_parameter_defaults_and_a_policy_gets_its_own_params():
    params = UrgencyParams()
    assert (params.p_safe_ms, params.p_yield_ms, params.p_max_ms) == (400.0, 1000.0, 2000.0)
    assert (params.alpha, params.beta, params.u1_ms_per_position) == (1.0, 0.25, 1.0)
    assert params.at_risk_prefill_tokens is None
    assert UrgencyParams(p_safe_ms=100, p_max_ms=math.inf, alpha=0, beta=2.5).p_max_ms == math.inf
    assert make_policy(SchedulerConfig(policy="urgency")).params == params  # None: the policy's defaults
    assert make_policy(SchedulerConfig()).params == FCFSParams()
    given = UrgencyParams(p_safe_ms=100, p_max_ms=math.inf)
    assert make_policy(SchedulerConfig(policy="urgency", params=given)).params is given
    with pytest.raises(ValueError, match="unknown scheduling policy 'edf'; choose from \\['fcfs', 'urgency'\\]"):
        make_policy(SchedulerConfig(policy="edf"))
    with pytest.raises(ValueError, match="scheduling policy 'fcfs' takes FCFSParams, got UrgencyParams"):
        make_policy(SchedulerConfig(policy="fcfs", params=params))


# ---------------------------------------------------------------- classes and order within them

def test_classes_split_at_p_safe_and_the_started_flag():
    view = FakeView(at_safe=playing(400.0), above_safe=playing(400.5), empty=playing(0.0),
                    waiting=PlaybackState(started=False, drained_at=0.0, queued_ms=0.0),
                    long=playing(1999.0), past_max=playing(2000.0))
    policy = urgency(view)
    requests = [ready(rid, float(i), since=0.0) for i, rid in
                enumerate(["past_max", "long", "above_safe", "waiting", "at_safe", "empty"])]
    # U0 by smallest P (empty 0 ms, at_safe 400 ms), U1 (waiting), U2 (above_safe); past_max (P = p_max)
    # is held while others are served, and long (P >= p_yield) yields while a listener waits.
    assert ids(policy.order(requests, now=0.0)) == ["empty", "at_safe", "waiting", "above_safe"]
    assert policy.counters == {
        "rounds": 1, "u0": 2, "u1": 1, "u2": 1, "fallbacks": 0, "speculative": 0, "held": 1, "yielded": 1,
        "gated": 0}


def test_audio_the_request_produced_beyond_what_its_state_counts_is_in_its_buffer():
    # The states reach the stage after its output: "fresh" counts the 1.2 s its request produced, "stale"
    # counts 0.5 s of it, "unsent" none of it (not started yet), "uncounted" does not count delivered audio.
    view = FakeView(fresh=PlaybackState(True, drained_at=10.9, delivered_ms=1200.0),
                    stale=PlaybackState(True, drained_at=10.2, delivered_ms=500.0),
                    unsent=PlaybackState(False, drained_at=0.0, delivered_ms=0.0),
                    uncounted=PlaybackState(False, drained_at=0.0), waiting=NOT_STARTED)
    requests = [ready(rid, 0.0, since=0.0) for rid in ("waiting", "uncounted", "unsent", "stale", "fresh")]
    for request in requests[1:]:
        request.audio_ms = 1200.0
    policy = urgency(view, p_safe_ms=1000.0, p_yield_ms=1500.0, p_max_ms=3000.0)
    # At 10 s fresh has 0.9 s left to play; stale 0.2 s, and 0.7 s it produced: both U0 (P ~900 ms). unsent has
    # started with the 1.2 s it produced: U2. uncounted and waiting wait for their first audio: U1.
    assert ids(policy.order(requests, now=10.0)) == ["stale", "fresh", "waiting", "uncounted", "unsent"]
    assert policy.counters["u0"] == 2 and policy.counters["u1"] == 2 and policy.counters["u2"] == 1


def test_u1_goes_by_ready_age_not_by_arrival():
    policy = urgency(FakeView(a=NOT_STARTED, b=NOT_STARTED, c=NOT_STARTED))
    requests = [ready("a", 0.0, since=7.0), ready("b", 5.0, since=3.0), ready("c", 1.0, since=3.0)]
    # b and c have waited since t=3, a only since t=7 (it arrived first, but its new turn is recent);
    # b and c tie on ready age: they keep the order given.
    assert ids(policy.order(requests, now=8.0)) == ["b", "c", "a"]


def prompt(rid: str, since: float, num_tokens: int):
    """A thinker request whose `num_tokens`-token prompt is pending, ready since `since`."""
    request = thinker(rid, 0.0, list(range(1, num_tokens + 1)), max_tokens=1)
    request.ready_since = since
    return request


def test_u1_listeners_who_started_waiting_together_go_least_work_first():
    policy = urgency(FakeView(long=NOT_STARTED, mid=NOT_STARTED, short=NOT_STARTED))
    requests = [prompt("long", 1.0, 900), prompt("mid", 1.0, 120), prompt("short", 1.0, 20)]
    assert ids(policy.order(requests, now=1.0)) == ["short", "mid", "long"]


def test_u1_work_is_weighed_against_ready_age_so_a_long_prompt_does_not_starve():
    policy = urgency(FakeView(long=NOT_STARTED, soon=NOT_STARTED, later=NOT_STARTED), u1_ms_per_position=0.25)
    # long's 900 positions count as 225 ms: a 20-position prompt ready 100 ms after it goes first,
    # one ready 300 ms after it does not.
    requests = [prompt("long", 1.0, 900), prompt("later", 1.3, 20), prompt("soon", 1.1, 20)]
    assert ids(policy.order(requests, now=1.3)) == ["soon", "long", "later"]
    by_age = urgency(FakeView(long=NOT_STARTED, soon=NOT_STARTED, later=NOT_STARTED), u1_ms_per_position=0)
    assert ids(by_age.order(requests, now=1.3)) == ["long", "soon", "later"]


def test_a_draining_buffer_moves_a_reply_from_u2_to_u0():
    view = FakeView(r=PlaybackState(started=True, drained_at=0.9), w=NOT_STARTED)
    policy = urgency(view)
    requests = [ready("w", 0.0, since=0.0), ready("r", 1.0, since=0.0)]
    assert ids(policy.order(requests, now=0.0)) == ["w", "r"]  # P = 900 ms: U2, after first audio
    assert ids(policy.order(requests, now=0.6)) == ["r", "w"]  # P = 300 ms <= 400: at risk, first
    assert policy.counters["u0"] == 1 and policy.counters["u2"] == 1 and policy.counters["u1"] == 2


@pytest.mark.parametrize("gate_ms, at_1s, at_2s", [
    (2000.0, ["r"], ["r", "w"]),        # w waits while r has <= 100 ms to play, at most 2 s from when it became ready
    (math.inf, ["r"], ["r"]),           # w waits for as long as r is that short
    (0.0, ["r", "w"], ["r", "w"]),      # never gated
])
def test_first_audio_waits_while_a_reply_playing_is_about_to_run_dry_at_most_the_gate(gate_ms, at_1s, at_2s):
    view = FakeView(r=playing(100.0), w=NOT_STARTED)
    policy = urgency(view, first_audio_gate_ms=gate_ms)
    requests = [ready("w", 0.0, since=0.0), ready("r", 1.0, since=0.0)]
    assert ids(policy.order(requests, now=1.0)) == at_1s
    assert ids(policy.order(requests, now=2.0)) == at_2s
    view.states["r"] = playing(101.0)  # at risk, but not about to run dry: first audio is not gated
    assert ids(policy.order(requests, now=1.0)) == ["r", "w"]
    view.states["r"] = playing(900.0)  # r out of risk: first audio goes ahead of it again
    assert ids(policy.order(requests, now=2.5)) == ["w", "r"]


def test_the_buffer_is_the_states_own_buffer_ms():
    at_safe = PlaybackState(True, drained_at=1.25, queued_ms=150.0)  # at t=1: 250 ms left to play + 150 queued
    above = PlaybackState(True, drained_at=1.25, queued_ms=150.5)
    at_max = PlaybackState(True, drained_at=0.5, queued_ms=4000.0)  # delivered audio ran out: the queue alone
    assert [s.buffer_ms(1.0) for s in (at_safe, above, at_max)] == [400.0, 400.5, 4000.0]
    policy = urgency(FakeView(at_safe=at_safe, above=above, at_max=at_max, w=NOT_STARTED))
    requests = [ready(rid, 0.0, since=0.0) for rid in ("at_max", "above", "w", "at_safe")]
    assert ids(policy.order(requests, now=1.0)) == ["at_safe", "w", "above"]  # U0, U1, U2; at_max held


@pytest.mark.parametrize("alpha, beta, expected", [
    # Pool of 10 blocks: a holds 4, b 1, c 0 -> R_occ = 0.5; p_safe = 400; P: a 2000, b 600, c 440.
    # U = beta*K*R_occ - alpha*(P - 400)/400:
    (1.0, 1.0, ["b", "c", "a"]),  # a: 2 - 4 = -2;  b: 0.5 - 0.5 = 0;   c: 0 - 0.1 = -0.1
    (1.0, 3.0, ["a", "b", "c"]),  # a: 6 - 4 = 2;   b: 1.5 - 0.5 = 1;   c: -0.1
    (0.0, 1.0, ["a", "b", "c"]),  # exposure off: by KV held, 2 > 0.5 > 0
    (1.0, 0.0, ["c", "b", "a"]),  # relief off: by buffer excess, -0.1 > -0.5 > -4
])
def test_u2_goes_by_utility_of_kv_relief_against_exposure(alpha, beta, expected):
    kv = make_kv(10)  # blocks of 4 tokens
    kv.reserve("a", 16)
    kv.reserve("b", 4)
    policy = urgency(FakeView(a=playing(2000.0), b=playing(600.0), c=playing(440.0)), kv, alpha=alpha, beta=beta,
                     p_max_ms=4000.0)
    requests = [ready(rid, 0.0, since=0.0) for rid in ("a", "b", "c")]
    requests[0].status = requests[1].status = RequestStatus.RUNNING  # admitted: they hold their KV; c waits
    assert ids(policy.order(requests, now=0.0)) == expected


def test_without_kv_u2_goes_by_buffer_alone():
    policy = urgency(FakeView(a=playing(2000.0), b=playing(600.0), c=playing(440.0)), kv=None, beta=100.0,
                     p_max_ms=4000.0)
    assert ids(policy.order([ready(rid, 0.0, since=0.0) for rid in ("a", "b", "c")], now=0.0)) == ["c", "b", "a"]


# ---------------------------------------------------------------- fail closed

def test_requests_without_telemetry_are_ordered_by_ready_age_among_u1_and_counted():
    view = FakeView(y=NOT_STARTED, z=NOT_STARTED, w=playing(900.0), r=playing(100.0))
    policy = urgency(view, first_audio_gate_ms=2000)
    requests = [ready("w", 0.0, since=0.0), ready("y", 0.0, since=2.0), ready("x", 0.0, since=1.0),
                ready("z", 0.0, since=0.5), ready("r", 0.0, since=0.0)]
    # r at risk; then z (since 0.5), x (no telemetry, since 1.0); w is U2. y, ready 1 s ago, waits while r is at
    # risk (z has waited past the gate's 2 s; x, without telemetry, is never gated).
    assert ids(policy.order(requests, now=3.0)) == ["r", "z", "x", "w"]
    assert policy.counters["fallbacks"] == 1 and policy.counters["u1"] == 1 and policy.counters["gated"] == 1


def test_without_a_view_every_request_is_a_fallback_in_ready_age_order():
    policy = urgency(view=None)
    requests = [ready("late", 0.0, since=4.0), ready("early", 9.0, since=1.0), ready("mid", 5.0, since=2.0)]
    assert ids(policy.order(requests, now=5.0)) == ["early", "mid", "late"]
    assert ids(policy.order(requests, now=6.0)) == ["early", "mid", "late"]
    assert policy.counters == {
        "rounds": 2, "u0": 0, "u1": 0, "u2": 0, "fallbacks": 6, "speculative": 0, "held": 0, "yielded": 0,
        "gated": 0}


# ---------------------------------------------------------------- the scheduler under urgency and fcfs

@pytest.mark.parametrize("policy, expected", [
    ("urgency", [("c", 0, 6), ("b", 0, 2)]),  # first audio, then the shorter buffer; a waits
    ("fcfs", [("a", 0, 6), ("b", 0, 2)]),     # by arrival: the listener still waiting for audio gets nothing
])
def test_first_audio_goes_ahead_of_long_buffers_under_a_tight_token_budget(policy, expected):
    view = FakeView(a=playing(900.0), b=playing(700.0), c=NOT_STARTED)  # buffers under p_yield: not yielding
    scheduler, runner, _ = make_scheduler(max_tokens=8, view=view, policy=policy)
    for i, rid in enumerate("abc"):
        scheduler.add(thinker(rid, float(i), [i + 1] * 6, max_tokens=3))
    plan, _ = step(scheduler, runner)
    assert chunks_of(plan) == expected
    left_out = ({"a", "b", "c"} - {rid for rid, _, _ in expected}).pop()
    assert scheduler.requests[left_out].status is RequestStatus.WAITING


@pytest.mark.parametrize("policy, expected", [("urgency", ["d", "c"]), ("fcfs", ["a", "b"])])
def test_max_num_seqs_admits_the_most_urgent_and_the_rest_wait(policy, expected):
    view = FakeView(a=playing(1500.0), b=playing(900.0), c=NOT_STARTED, d=playing(100.0))
    scheduler, runner, _ = make_scheduler(max_seqs=2, view=view, policy=policy)
    for i, rid in enumerate("abcd"):
        scheduler.add(thinker(rid, float(i), [5, 6, 7], max_tokens=3))
    plan, _ = step(scheduler, runner)
    assert [c.request.request_id for c in plan.chunks] == expected
    assert all(scheduler.requests[r].status is RequestStatus.WAITING for r in "abcd" if r not in expected)


@pytest.mark.parametrize("policy, expected", [
    ("urgency", [("c", 0, 3), ("b", 2, 1)]),  # c jumps both running replies; a (the longer buffer) sits out
    ("fcfs", [("a", 2, 1), ("b", 2, 1)]),     # running first: c waits for a seat
])
def test_a_waiting_first_audio_request_and_running_long_buffers(policy, expected):
    view = FakeView(a=playing(900.0), b=playing(700.0))  # buffers under p_yield: not yielding to c
    scheduler, runner, _ = make_scheduler(max_tokens=4, max_seqs=2, view=view, policy=policy)
    scheduler.add(thinker("a", 0.0, [1, 2], max_tokens=20))
    scheduler.add(thinker("b", 1.0, [3, 4], max_tokens=20))
    step(scheduler, runner)  # a and b prefill; both RUNNING, decoding from now on
    scheduler.add(thinker("c", 2.0, [5, 6, 7], max_tokens=2))
    view.states["c"] = NOT_STARTED
    plan, _ = step(scheduler, runner)
    assert chunks_of(plan) == expected
    assert scheduler.requests["a"].status is RequestStatus.RUNNING  # sitting out a round costs no KV


@pytest.mark.parametrize("policy, expected", [
    ("urgency", [("c", 0, 2), ("b", 2, 1), ("a", 2, 1)]),  # c first, chunked to leave both replies a token
    ("fcfs", [("a", 2, 1), ("b", 2, 1), ("c", 0, 2)]),     # running first, c takes what is left
])
def test_a_long_first_audio_prompt_does_not_stall_the_replies_playing(policy, expected):
    view = FakeView(a=playing(900.0), b=playing(700.0))
    scheduler, runner, _ = make_scheduler(max_tokens=4, max_seqs=4, view=view, policy=policy)
    scheduler.add(thinker("a", 0.0, [1, 2], max_tokens=20))
    scheduler.add(thinker("b", 1.0, [3, 4], max_tokens=20))
    step(scheduler, runner)
    scheduler.add(thinker("c", 2.0, [5] * 9, max_tokens=2))
    view.states["c"] = NOT_STARTED
    plan, _ = step(scheduler, runner)
    assert chunks_of(plan) == expected


@pytest.mark.parametrize("a_buffer_ms, cap, expected", [
    (300.0, 3, [("a", 2, 1), ("c", 0, 3), ("b", 2, 1)]),    # a at risk: the prompt takes at most 3 positions
    (300.0, None, [("a", 2, 1), ("c", 0, 6), ("b", 2, 1)]),  # no cap: what the budget leaves the replies
    (900.0, 3, [("c", 0, 6), ("b", 2, 1), ("a", 2, 1)]),    # nobody at risk: no cap
])
def test_while_a_reply_playing_is_at_risk_a_round_prefills_at_most_the_cap(a_buffer_ms, cap, expected):
    view = FakeView(a=playing(700.0), b=playing(700.0))
    params = UrgencyParams(at_risk_prefill_tokens=cap)
    scheduler, runner, _ = make_scheduler(max_tokens=8, max_seqs=4, view=view, policy="urgency", params=params)
    scheduler.add(thinker("a", 0.0, [1, 2], max_tokens=20))
    scheduler.add(thinker("b", 1.0, [3, 4], max_tokens=20))
    step(scheduler, runner)
    scheduler.add(thinker("c", 2.0, [5] * 9, max_tokens=2))
    view.states["a"], view.states["c"] = playing(a_buffer_ms), NOT_STARTED
    plan, _ = step(scheduler, runner)
    assert chunks_of(plan) == expected
    assert scheduler.policy.prefill_cap == (cap if a_buffer_ms <= 400.0 else None)


def test_a_new_first_audio_request_leaves_running_replies_room_to_decode():
    # 4 blocks of 4. a, b: 4-token prompts that decode into a second block next; c: new, 3 tokens.
    view = FakeView(a=playing(600.0), b=playing(800.0))
    scheduler, runner, kv = make_scheduler(num_blocks=4, view=view, policy="urgency")
    scheduler.add(thinker("a", 0.0, [1, 2, 3], max_tokens=9))
    scheduler.add(thinker("b", 1.0, [4, 5, 6], max_tokens=9))
    step(scheduler, runner)
    step(scheduler, runner)  # both hold 4 positions in one block; the next token needs a second each
    scheduler.add(thinker("c", 2.0, [7, 8, 9], max_tokens=2))
    view.states["c"] = NOT_STARTED  # ordered first (U1), but its block would be a's or b's growth
    plan, _ = step(scheduler, runner)
    assert chunks_of(plan) == [("a", 4, 1), ("b", 4, 1)] and plan.preempted == []
    assert scheduler.requests["c"].status is RequestStatus.WAITING and scheduler.num_preemptions == 0


def test_a_request_past_p_max_is_held_even_alone_until_playback_catches_up():
    view = FakeView(a=playing(2500.0), b=NOT_STARTED)
    scheduler, runner, kv = make_scheduler(view=view, policy="urgency")
    scheduler.add(thinker("a", 0.0, [1, 2, 3], max_tokens=2))
    scheduler.add(thinker("b", 1.0, [4, 5, 6], max_tokens=2))
    plan, _ = step(scheduler, runner)  # b prefills; a is held, not even admitted
    assert chunks_of(plan) == [("b", 0, 3)] and scheduler.requests["a"].status is RequestStatus.WAITING
    plan, _ = step(scheduler, runner)  # b decodes its last token and finishes; a still held
    assert chunks_of(plan) == [("b", 3, 1)] and "b" not in scheduler.requests
    plan, _ = step(scheduler, runner)  # a alone: the stage idles rather than run further ahead
    assert plan.chunks == [] and kv.num_blocks_held("a") == 0
    view.states["a"] = playing(1900.0)  # playback brought it back under p_max_ms
    plan, _ = step(scheduler, runner)
    assert chunks_of(plan) == [("a", 0, 3)]
    assert scheduler.policy.counters["held"] == 3


def test_with_p_resume_a_held_request_waits_for_the_lower_mark_and_says_when():
    view = FakeView(a=playing(2500.0))
    policy = urgency(view, p_resume_ms=600.0)
    request = ready("a", 0.0, since=0.0)
    assert policy.order([request], now=10.0) == [] and policy.resume_at == {"a": pytest.approx(11.9)}
    view.states["a"] = playing(1500.0)  # under p_max, above p_resume: still held
    assert policy.order([request], now=10.5) == [] and policy.resume_at == {"a": pytest.approx(11.4)}
    view.states["a"] = playing(600.0)
    assert ids(policy.order([request], now=11.4)) == ["a"] and policy.resume_at == {}
    view.states["a"] = playing(1500.0)  # released: under p_max it is served again
    assert ids(policy.order([request], now=11.5)) == ["a"]
    assert policy.counters["held"] == 2


def test_without_p_resume_a_hold_ends_under_p_max_and_publishes_when():
    view = FakeView(a=playing(2500.0))
    policy = urgency(view)
    request = ready("a", 0.0, since=0.0)
    assert policy.order([request], now=10.0) == []
    assert policy.resume_at == {"a": 10.5}  # 500 ms above p_max, draining at 1x: the KV may leave meanwhile
    view.states["a"] = playing(1999.0)
    assert ids(policy.order([request], now=10.5)) == ["a"]


def test_pacing_stops_once_the_stages_kv_outgrows_pace_kv_share_of_the_pool():
    view = FakeView(w=NOT_STARTED, far=playing(1500.0), past_max=playing(2500.0))
    kv = make_kv(10)
    policy = urgency(view, kv, pace_kv_share=0.5)
    requests = [ready(rid, 0.0, since=0.0) for rid in ("far", "past_max", "w")]
    kv.reserve("x", 4 * BLOCK)  # with the block w waits to take, half the pool: still paced
    assert ids(policy.order(requests, now=0.0)) == ["w"] and policy.resume_at == {"past_max": 0.5}
    kv.reserve("y", 1)  # past the share: nothing is held or yields
    assert ids(policy.order(requests, now=0.0)) == ["w", "far", "past_max"] and policy.resume_at == {}
    assert policy.counters["held"] == 1 and policy.counters["yielded"] == 1
    kv.free("y")
    assert ids(policy.order(requests, now=0.0)) == ["w"]


def test_first_audio_waiting_for_admission_counts_its_room_against_pacing_and_nothing_else_waiting_does():
    view = FakeView(held=playing(2500.0), new_turn=NOT_STARTED, recomputing=playing(2500.0))
    kv = make_kv(10)
    policy = urgency(view, kv, pace_kv_share=0.5)
    held = ready("held", 0.0, since=0.0)
    held.status = RequestStatus.RUNNING
    kv.reserve("held", 3 * BLOCK)
    new_turn = thinker("new_turn", 1.0, [1] * (2 * BLOCK + 1), max_tokens=1)  # 3 blocks to take
    new_turn.ready_since = 1.0
    # 3 held + 3 to take > half the pool: the new turn would not fit, so the reply is not held
    assert ids(policy.order([held, new_turn], now=1.0)) == ["new_turn", "held"] and policy.resume_at == {}
    recomputing = thinker("recomputing", 0.5, [1] * (2 * BLOCK + 1), max_tokens=1)  # a started reply, not waited on
    recomputing.ready_since = 1.0
    assert policy.order([held, recomputing], now=1.0) == [] and set(policy.resume_at) == {"held", "recomputing"}
    short_turn = thinker("new_turn", 1.0, [1] * BLOCK, max_tokens=1)  # one block: 4 of 5 taken, still paced
    short_turn.ready_since = 1.0
    assert policy.order([held, short_turn], now=1.0) == [short_turn] and set(policy.resume_at) == {"held"}


def test_a_stage_past_its_share_stops_the_pacing_of_every_stage_on_its_device():
    device, view = SharedDevice(), FakeView(past_max=playing(2500.0))
    talker_kv = make_kv(10)
    params = SchedulerConfig(policy="urgency", params=UrgencyParams(pace_kv_share=0.5))
    thinker_policy = make_policy(SchedulerConfig(policy="urgency"), view, make_kv(10), device)
    talker_policy = make_policy(params, view, talker_kv, device)
    held = [ready("past_max", 0.0, since=0.0)]
    assert thinker_policy.order(held, now=0.0) == []  # 2.5 s ahead of its listener: held
    talker_kv.reserve("x", 6 * BLOCK)  # the talker's replies fill its pool past its share
    talker_policy.order([], now=0.0)
    assert ids(thinker_policy.order(held, now=0.0)) == ["past_max"]  # its reply runs on, the talker's goes dormant
    talker_kv.free("x")
    talker_policy.order([], now=0.0)
    assert thinker_policy.order(held, now=0.0) == []


def test_a_held_running_request_is_the_first_active_victim():
    # 5 blocks of 4. a, b: 8-token prompts (2 blocks each); c: a 4-token prompt (1 block).
    view = FakeView(a=NOT_STARTED, b=NOT_STARTED, c=playing(900.0))
    scheduler, runner, kv = make_scheduler(num_blocks=5, view=view, policy="urgency",
                                           params=UrgencyParams(pace_kv_share=math.inf))  # paced in a full pool
    for rid, arrival, prompt in (("a", 0.0, [1] * 8), ("b", 1.0, [2] * 8), ("c", 2.0, [3] * 4)):
        scheduler.add(thinker(rid, arrival, prompt, max_tokens=5))
    plan, _ = step(scheduler, runner)  # all three prefill: the pool is full
    assert kv.num_free_blocks == 0
    view.states["a"] = playing(6000.0)  # a's reply now plays with 6 s buffered: held
    view.states["b"] = playing(100.0)   # b's listener is about to run dry
    plan, _ = step(scheduler, runner)
    # b needs a third block: the held a goes (not c, the latest arrival); c then grows into a's freed block.
    assert plan.preempted == ["a"] and chunks_of(plan) == [("b", 8, 1), ("c", 4, 1)]
    assert scheduler.requests["a"].status is RequestStatus.WAITING and kv.num_blocks_held("c") == 2


def test_a_held_request_keeps_its_kv_while_held():
    view = FakeView(a=NOT_STARTED, b=NOT_STARTED)
    scheduler, runner, kv = make_scheduler(view=view, policy="urgency")
    scheduler.add(thinker("a", 0.0, [1] * 6, max_tokens=10))
    scheduler.add(thinker("b", 1.0, [2] * 6, max_tokens=10))
    step(scheduler, runner)
    view.states["a"] = playing(4000.0)
    for _ in range(3):  # a is held at P = p_max: b decodes alone, a keeps its 2 blocks and its progress
        plan, _ = step(scheduler, runner)
        assert [c.request.request_id for c in plan.chunks] == ["b"]
        assert kv.num_blocks_held("a") == 2 and scheduler.requests["a"].num_computed == 6
    view.states["a"] = playing(900.0)  # back under p_max and p_yield (b's listener still waits): served again
    plan, _ = step(scheduler, runner)
    assert ("a", 6, 1) in chunks_of(plan)


@pytest.mark.parametrize("policy, expected", [("urgency", [("n", 4, 4)]), ("fcfs", [("s", 3, 4)])])
def test_ready_age_restarts_when_a_resident_request_gets_a_new_turn(policy, expected):
    clock = FakeClock()
    view = FakeView(s=NOT_STARTED, n=NOT_STARTED)
    scheduler, runner, _ = make_scheduler(max_tokens=4, clock=clock, view=view, policy=policy)
    resident = thinker("s", 0.0, [1, 2, 3], max_tokens=None, close=False)  # context only: idle after one round
    scheduler.add(resident)
    step(scheduler, runner)
    assert resident.num_pending == 0 and resident.ready_since is None
    clock.t = 5.0
    scheduler.add(thinker("n", 5.0, [4] * 12, max_tokens=1))  # a long prompt: chunked, ready since t=5
    step(scheduler, runner)
    clock.t = 10.0
    resident.append(TurnInput([5, 6, 7, 8], sampling=SamplingParams(temperature=0.0, max_tokens=1)))
    plan, _ = step(scheduler, runner)
    # urgency: n has waited since t=5, s only since t=10 (arrival 0 is the session's start, not the turn's).
    # fcfs serves the resident first (admitted, arrived first).
    assert resident.ready_since == 10.0 and scheduler.requests["n"].ready_since == 5.0
    assert chunks_of(plan) == expected


# ---------------------------------------------------------------- exposure and plumbing

# ---------------------------------------------------------------- yielding to a waiting listener

def test_a_waiting_listener_makes_work_buffered_past_p_yield_sit_out():
    view = FakeView(w=NOT_STARTED, near=playing(999.0), far=playing(1000.0), past_max=playing(2000.0))
    policy = urgency(view)
    requests = [ready(rid, 0.0, since=0.0) for rid in ("far", "past_max", "near", "w")]
    assert ids(policy.order(requests, now=0.0)) == ["w", "near"]
    assert policy.counters["yielded"] == 1 and policy.counters["held"] == 1
    view.states["w"] = playing(1500.0)  # first audio reached w's listener: nobody waits, far is served again
    assert ids(policy.order(requests, now=0.0)) == ["near", "far", "w"]
    assert policy.counters["yielded"] == 1 and policy.counters["held"] == 2


def test_p_yield_inf_never_yields():
    view = FakeView(w=NOT_STARTED, far=playing(1500.0))
    requests = [ready("far", 0.0, since=0.0), ready("w", 0.0, since=0.0)]
    assert ids(urgency(view, p_yield_ms=math.inf).order(requests, now=0.0)) == ["w", "far"]


def test_stages_sharing_a_device_yield_to_a_listener_waiting_at_another():
    device = SharedDevice()
    view = FakeView(new=NOT_STARTED, far=playing(1500.0), near=playing(700.0))
    thinker_policy = make_policy(SchedulerConfig(policy="urgency"), view, None, device)
    talker_policy = make_policy(SchedulerConfig(policy="urgency"), view, None, device)
    far, near = ready("far", 0.0, since=0.0), ready("near", 0.0, since=0.0)
    assert ids(talker_policy.order([far], now=0.0)) == ["far"]  # nobody waits: served
    thinker_policy.order([ready("new", 0.0, since=0.0)], now=0.0)  # the thinker has a new listener waiting
    assert talker_policy.order([far], now=0.0) == []  # the talker idles rather than run 1.5 s ahead
    assert ids(talker_policy.order([far, near], now=0.0)) == ["near"]  # under p_yield: still served
    thinker_policy.order([], now=0.0)  # the thinker's work for it is done
    assert ids(talker_policy.order([far, near], now=0.0)) == ["near", "far"]
    assert talker_policy.counters["yielded"] == 2


def test_stages_in_separate_processes_share_their_slots_in_one_array():
    slots = [False, False]  # shared memory in ProcessPlacement: each process's board hands out its own slot
    thinker_device, talker_device = SharedDevice(slots, first_slot=0), SharedDevice(slots, first_slot=1)
    view = FakeView(new=NOT_STARTED, far=playing(1500.0))
    thinker = make_policy(SchedulerConfig(policy="urgency"), view, None, thinker_device)
    talker = make_policy(SchedulerConfig(policy="urgency"), view, None, talker_device)
    thinker.order([ready("new", 0.0, since=0.0)], now=0.0)
    assert slots == [True, False] and talker.order([ready("far", 0.0, since=0.0)], now=0.0) == []


def test_requests_without_telemetry_make_no_stage_yield():
    device = SharedDevice()
    encoder = make_policy(SchedulerConfig(policy="urgency"), None, None, device)
    talker = make_policy(SchedulerConfig(policy="urgency"), FakeView(far=playing(1500.0)), None, device)
    encoder.order([ready("audio-in", 0.0, since=0.0)], now=0.0)
    assert ids(talker.order([ready("far", 0.0, since=0.0)], now=0.0)) == ["far"]


@pytest.mark.parametrize("policy, expected", [("urgency", []), ("fcfs", [("far", 0, 3)])])
def test_a_scheduler_yielding_its_device_plans_nothing_and_keeps_its_requests(policy, expected):
    device = SharedDevice()
    view = FakeView(far=playing(1500.0), new=NOT_STARTED)
    make_policy(SchedulerConfig(policy="urgency"), view, None, device).order([ready("new", 0.0, since=0.0)], now=0.0)
    kv = make_kv(32)
    scheduler = Scheduler(SchedulerConfig(policy=policy), kv, FakeClock(), view, device=device)
    scheduler.add(thinker("far", 0.0, [1, 2, 3], max_tokens=2))
    plan = scheduler.schedule()
    assert chunks_of(plan) == expected and "far" in scheduler.requests


def test_stage_status_exposes_the_policy_counters():
    view = FakeView(a=NOT_STARTED, b=playing(100.0))
    scheduler, runner, kv = make_scheduler(view=view, policy="urgency")
    engine = StageEngine("thinker", scheduler, runner, lambda outputs: None)
    scheduler.add(thinker("a", 0.0, [1, 2], max_tokens=1))
    scheduler.add(thinker("b", 0.0, [3, 4], max_tokens=1))
    scheduler.add(thinker("x", 0.0, [5, 6], max_tokens=1))
    engine.step()
    engine.step()  # nothing is ready: no round for the policy
    assert engine.status().policy_counters == {
        "rounds": 1, "u0": 1, "u1": 1, "u2": 0, "fallbacks": 1, "speculative": 0, "held": 0, "yielded": 0,
        "gated": 0}
    fcfs, fcfs_runner, _ = make_scheduler()
    assert StageEngine("thinker", fcfs, fcfs_runner, lambda outputs: None).status().policy_counters == {}


def test_build_engine_hands_the_view_the_kv_and_the_device_to_the_policy():
    decoder = DecoderConfig(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8,
                            intermediate_size=32, max_position=64)
    spec = StageSpec("thinker", "thinker", decoder, SchedulerConfig(policy="urgency"), KVSpec(num_blocks=4))
    view, device = FakeView(), SharedDevice()
    engine = build_engine(spec, lambda outputs: None, FakeClock(), view, device)
    assert engine.scheduler.policy.view is view and engine.scheduler.policy.kv is engine.scheduler.kv is not None
    assert engine.scheduler.policy.device is device
    assert build_engine(spec, lambda outputs: None, FakeClock()).scheduler.policy.view is None  # the old call form
