"""The urgency policy's bound on its regret against FCFS, on adversarial queues and a fake clock: no first-audio
request is ordered behind one that became ready more than `u1_max_pass_ms` after it, unless that one's playback
is at risk (U0), and none is left out but by the gate: while a reply is about to run dry (`gate_buffer_ms`), and
for at most `first_audio_gate_ms` from when it became ready."""

import math
import random

import pytest

from stages.interaction import PlaybackState
from tests.stages.test_urgency_policy import NOT_STARTED, FakeView, ids, playing, prompt, urgency


def test_a_long_prompt_is_passed_only_by_turns_ready_within_the_bound():
    view = FakeView(long=NOT_STARTED, soon=NOT_STARTED, late=NOT_STARTED)
    requests = [prompt("long", 1.0, 900), prompt("late", 1.6, 10), prompt("soon", 1.4, 10)]
    # 900 positions would count as 900 ms; they count as 500 ms: soon (0.4 s later) passes, late (0.6 s) does not.
    assert ids(urgency(view).order(requests, now=1.6)) == ["soon", "long", "late"]
    assert ids(urgency(view, u1_max_pass_ms=math.inf).order(requests, now=1.6)) == ["soon", "late", "long"]
    assert ids(urgency(view, u1_max_pass_ms=0).order(requests, now=1.6)) == ["long", "soon", "late"]


def adversarial_queue(rng: random.Random, now: float):
    """Up to 40 ready requests: first-audio turns with prompts of 1 to 990 positions ready over the last 3 s
    (often together), replies at risk, playing, held or past p_yield, and requests without telemetry."""
    states, requests = {}, []
    for i in range(rng.randint(1, 40)):
        rid = f"r{i}"
        kind = rng.choice(["u1", "u1", "u1", "risk", "playing", "held", "yield", "none"])
        since = now - rng.choice([0.0, 0.0, rng.uniform(0, 3), round(rng.uniform(0, 3), 1)])
        requests.append(prompt(rid, since, rng.choice([1, rng.randint(1, 200), rng.randint(1, 990)])))
        if kind == "u1":
            states[rid] = NOT_STARTED
        elif kind != "none":
            states[rid] = {"risk": playing(rng.uniform(0, 400)), "playing": playing(rng.uniform(401, 999)),
                           "held": playing(rng.uniform(2000, 5000)), "yield": playing(rng.uniform(1000, 1999))}[kind]
    return FakeView(**states), requests


@pytest.mark.parametrize("bound_ms", [0.0, 100.0, 500.0, 2000.0])
def test_no_first_audio_request_is_passed_by_a_later_one_beyond_the_bound(bound_ms):
    rng = random.Random(bound_ms)
    for _ in range(500):
        now = rng.uniform(3, 100)
        view, requests = adversarial_queue(rng, now)
        ordered = urgency(view, u1_max_pass_ms=bound_ms, first_audio_gate_ms=2000.0).order(requests, now)
        at_risk = {r.request_id for r in requests if _is_at_risk(view.playback(r.request_id), now)}
        for position, request in enumerate(ordered):
            state = view.playback(request.request_id)
            if state is not None and state.started:
                continue
            for ahead in ordered[:position]:
                assert ahead.request_id in at_risk or ahead.ready_since <= request.ready_since + bound_ms / 1000, \
                    (request.request_id, ahead.request_id)
        # and a first-audio request is left out only by the gate, within its bound
        about_to_run_dry = any(_buffer(view.playback(r.request_id), now) <= 100.0 for r in requests)
        for request in set(requests) - set(ordered):
            state = view.playback(request.request_id)
            if state is None or not state.started:
                assert state is not None and about_to_run_dry and now - request.ready_since < 2.0, request.request_id


def _is_at_risk(state: PlaybackState | None, now: float) -> bool:
    return _buffer(state, now) <= 400.0


def _buffer(state: PlaybackState | None, now: float) -> float:
    """A started reply's playback buffer; inf for a request with no reply playing."""
    return state.buffer_ms(now) if state is not None and state.started else math.inf


def test_a_bound_that_is_not_a_number_at_least_zero_is_named():
    with pytest.raises(ValueError, match="u1_max_pass_ms must be a number >= 0"):
        urgency(None, u1_max_pass_ms=-1)
