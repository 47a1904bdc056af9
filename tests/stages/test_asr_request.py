"""An ASR request's passes (partials as speech grows, one final at its end) and how policies rank them (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from stages.config import SchedulerConfig
from stages.policies.urgency import UrgencyParams, UrgencyPolicy
from stages.requests import ASRRequest, Transcript
from stages.scheduler import Scheduler
from stages.shared_device import SharedDevice
from tests.stages.scheduler_harness import FakeClock

RATE = 16000


def speech(seconds: float) -> np.ndarray:
    return np.full(round(seconds * RATE), 0.1, np.float32)


def transcribe(request: ASRRequest) -> Transcript:
    """What the runner gives for a pass (the text does not matter here)."""
    return request.advance(1, Transcript("words", request.is_closed, len(request.speech())))


def test_a_partial_waits_for_half_a_second_of_new_speech_and_the_final_for_the_end():
    request = ASRRequest("a", 0.0, partial_every_s=0.5)
    request.append(speech(0.3))
    assert request.num_pending == 0
    request.append(speech(0.2))
    assert request.num_pending == 1 and request.is_speculative
    request.append(speech(0.4))  # passes do not queue: the next one reads all of it
    assert request.num_pending == 1 and request.num_schedulable(8) == 1
    assert transcribe(request).num_samples == round(0.9 * RATE)
    request.append(speech(0.4))
    assert request.num_pending == 0
    request.append(None, close=True)  # the speech ended: a final pass, however little came since
    assert request.num_pending == 1 and not request.is_speculative
    final = transcribe(request)
    assert final.is_final and final.num_samples == round(1.3 * RATE) and request.is_finished
    with pytest.raises(ValueError, match="closed"):
        request.append(speech(0.1))


def test_without_partials_or_past_one_window_only_the_final_pass_runs():
    quiet = ASRRequest("a", 0.0, partial_every_s=None)
    quiet.append(speech(3.0))
    long = ASRRequest("b", 0.0)
    long.append(speech(30.5))
    assert quiet.num_pending == long.num_pending == 0
    for request in (quiet, long):
        request.append(None, close=True)
        assert request.num_pending == 1


def test_an_empty_utterance_still_gets_its_final():
    request = ASRRequest("a", 0.0)
    request.append(None, close=True)
    assert request.num_pending == 1 and len(request.speech()) == 0


def test_urgency_serves_a_final_pass_before_older_partials_and_yields_partials_to_waiting_listeners():
    clock = FakeClock()
    scheduler = Scheduler(SchedulerConfig(policy="urgency", max_num_seqs=1), None, clock)
    older, ended = ASRRequest("older", 0.0), ASRRequest("ended", 1.0)
    for request in (older, ended):
        request.append(speech(0.6))
        scheduler.add(request)
    clock.t = 2.0
    plan = scheduler.schedule()
    assert [c.request.request_id for c in plan.chunks] == ["older"]  # both partials: oldest ready first
    ended.append(None, close=True)
    clock.t = 3.0
    assert [c.request.request_id for c in scheduler.schedule().chunks] == ["ended"]
    assert scheduler.policy.counters["speculative"] == 3 and scheduler.policy.counters["fallbacks"] == 1

    device = SharedDevice()
    policy = UrgencyPolicy(UrgencyParams(), device=device)
    device.report(device.join(), True)  # a listener waits for first audio at another stage on this device
    assert policy.order([older], 4.0) == [] and policy.counters["yielded"] == 1


def test_a_pause_makes_a_pass_over_the_speech_so_far_due_and_the_final_reuses_it():
    request = ASRRequest("a", 0.0, partial_every_s=None)
    request.append(speech(1.2))
    assert request.num_pending == 0
    request.speech_paused()  # the user went quiet: the turn may be over
    assert request.num_pending == 1 and not request.is_speculative  # first-audio work now
    paused = transcribe(request)
    assert not paused.is_final and request.reusable_text() == "words"
    request.append(None, close=True)  # the pause ended the speech, with nothing after it
    assert request.num_pending == 1 and request.reusable_text() == "words"


def test_speech_after_a_pause_needs_a_pass_of_its_own():
    request = ASRRequest("a", 0.0, partial_every_s=None)
    request.append(speech(1.2))
    request.speech_paused()
    transcribe(request)
    request.append(speech(0.3))  # the user went on
    assert not request.is_pausing and request.is_speculative and request.reusable_text() is None
    request.append(None, close=True)
    assert request.num_pending == 1 and request.reusable_text() is None
