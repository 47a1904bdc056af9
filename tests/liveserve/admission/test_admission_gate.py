"""Admission gates on a fake clock: AIMD's cap rises, drops and holds as the issue says."""

from __future__ import annotations

import pytest

from liveserve.admission import AdmissionConfig, FixedAdmission, make_admission
from liveserve.admission.aimd import AIMDAdmission, p99

BUDGET_S = 0.08  # an 80 ms frame: with target 0.5 the limit is 40 ms
GOOD, BAD = 0.02, 0.06


def aimd(**overrides) -> AIMDAdmission:
    config = AdmissionConfig(**{"policy": "aimd", "initial_cap": 4, "min_cap": 1, "target": 0.5,
                                "decrease_factor": 0.7, "interval_s": 1.0, "latency_window_s": None,
                                "probe_wait_s": None, "decrease_after": 1, **overrides})
    return AIMDAdmission(config, BUDGET_S, max_cap=8)


def interval(gate: AIMDAdmission, now: float, live: int, *latencies: float):
    """Frames observed during (now - 1, now], then the tick that closes the interval at `now`."""
    for latency in latencies:
        gate.observe_frame(latency, now - 0.5)
    return gate.tick(live, now)


def test_fixed_admits_up_to_max_sessions_and_counts_decisions():
    gate = make_admission(AdmissionConfig(policy="fixed"), BUDGET_S, max_cap=2)
    assert isinstance(gate, FixedAdmission) and gate.cap == 2
    assert [gate.admit(live, 0.0) for live in (0, 1, 2, 3)] == [True, True, False, False]
    assert (gate.num_admitted, gate.num_rejected) == (2, 2)
    gate.observe_frame(10.0, 0.0)
    assert gate.tick(2, 5.0) is None and gate.cap == 2  # no control law


def test_rises_by_one_per_interval_while_latency_is_good_and_live_approaches_the_cap():
    gate = aimd()
    assert gate.tick(3, 0.0) is None  # the first tick starts the first interval
    assert gate.tick(3, 0.5) is None  # the interval has not passed
    assert interval(gate, 1.0, 3, GOOD, GOOD).decision == "increase" and gate.cap == 5  # live 3 >= 4 - 1
    assert interval(gate, 2.0, 5, GOOD).decision == "increase" and gate.cap == 6  # live at the cap
    assert gate.adjustments == {"increase": 2, "decrease": 0, "hold": 0}
    assert gate.last.p99_s == GOOD and gate.last.num_frames == 1 and gate.last.live == 5


def test_no_rise_while_live_is_far_below_the_cap():
    gate = aimd()
    gate.tick(0, 0.0)
    for second in range(1, 4):
        assert interval(gate, float(second), 2, GOOD).decision == "hold"  # 2 < 4 - 1
    assert gate.cap == 4


def test_drops_multiplicatively_to_live_times_factor():
    gate = aimd(initial_cap=8)
    gate.tick(8, 0.0)
    adjustment = interval(gate, 1.0, 8, GOOD, BAD)  # p99 of two frames is their maximum: 60 ms > 40 ms
    assert adjustment.decision == "decrease" and gate.cap == 5  # floor(8 x 0.7)
    assert interval(gate, 2.0, 7, BAD).decision == "decrease" and gate.cap == 4  # floor(7 x 0.7)
    assert interval(gate, 3.0, 10, BAD).cap == 4  # floor(10 x 0.7) = 7: a decrease never raises the cap


def test_caps_stay_within_min_and_max():
    gate = aimd(min_cap=2)
    gate.tick(1, 0.0)
    assert interval(gate, 1.0, 1, BAD).cap == 2  # floor(1 x 0.7) = 0, floored at min_cap
    for second in range(2, 12):
        interval(gate, float(second), gate.cap, GOOD)
    assert gate.cap == 8 and gate.last.decision == "hold"  # never above max_cap
    assert AIMDAdmission(AdmissionConfig(policy="aimd", initial_cap=20), BUDGET_S, max_cap=8).cap == 8
    with pytest.raises(ValueError, match="min_cap"):
        AIMDAdmission(AdmissionConfig(policy="aimd", min_cap=9, initial_cap=9), BUDGET_S, max_cap=8)


def test_holds_without_samples_and_counts_the_interval():
    gate = aimd()
    gate.tick(3, 0.0)
    assert interval(gate, 1.0, 3).decision == "hold" and gate.cap == 4
    assert gate.last.p99_s is None and gate.last.num_frames == 0
    gate.observe_frame(BAD, 1.2)
    assert interval(gate, 2.0, 3).decision == "decrease"  # frames of this interval only
    assert interval(gate, 3.0, 2).decision == "hold"  # the bad frame was not carried over
    assert gate.adjustments == {"increase": 0, "decrease": 1, "hold": 2}


def test_admit_follows_the_moving_cap():
    gate = aimd(initial_cap=2)
    assert gate.admit(1, 0.0) and not gate.admit(2, 0.0)
    gate.tick(2, 0.0)
    interval(gate, 1.0, 2, GOOD)
    assert gate.admit(2, 1.0)  # the cap rose to 3
    assert (gate.num_admitted, gate.num_rejected) == (2, 1)


def test_p99_is_the_nearest_rank():
    assert p99([]) is None
    assert p99([0.03, 0.01, 0.02]) == 0.03  # few samples: the maximum
    assert p99([float(i) for i in range(1, 201)]) == 198.0  # rank ceil(0.99 x 200)


def test_a_latency_window_judges_the_p99_of_its_frames_not_one_interval_s_maximum():
    gate = aimd(latency_window_s=5.0, initial_cap=6)
    gate.tick(5, 0.0)
    for second in range(1, 5):
        assert interval(gate, float(second), 5, *[GOOD] * 50).decision == "hold"  # not yet a whole window
    assert interval(gate, 5.0, 5, BAD, *[GOOD] * 49).decision == "increase"  # 1 outlier in 250 frames: p99 good
    assert gate.last.num_frames == 250 and gate.last.p99_s == GOOD
    assert interval(gate, 6.0, 6, *[BAD] * 10, *[GOOD] * 40).decision == "decrease"  # the 50 frames since the rise: 10 over
    assert gate.cap == 4  # floor(6 x 0.7)


def test_each_change_of_the_cap_waits_for_a_whole_window_of_newer_frames():
    gate = aimd(latency_window_s=3.0, initial_cap=4)
    gate.tick(4, 0.0)
    assert interval(gate, 1.0, 4, BAD).decision == "decrease" and gate.cap == 2
    assert interval(gate, 2.0, 3, GOOD).decision == "hold"  # live above the cap: no rise, however good
    decisions = [interval(gate, float(second), 2, GOOD).decision for second in range(3, 11)]  # one session left
    # a whole window after the drop (4.0), then after each rise (7.0); at 10.0 live 2 is no longer near the cap
    assert decisions == ["hold", "increase", "hold", "hold", "increase", "hold", "hold", "hold"]
    assert gate.cap == 4


def test_frames_older_than_the_window_no_longer_count():
    gate = aimd(latency_window_s=2.0)
    gate.tick(3, 0.0)
    assert interval(gate, 1.0, 3, GOOD).num_frames == 1
    assert interval(gate, 2.0, 3).num_frames == 1  # the frame at 0.5 is still within (0, 2]
    assert interval(gate, 3.0, 3).num_frames == 0 and gate.last.decision == "hold"


def test_with_decrease_after_2_one_slow_interval_holds_and_is_not_judged_twice():
    gate = aimd(initial_cap=6, latency_window_s=3.0, decrease_after=2)
    gate.tick(6, 0.0)
    assert interval(gate, 1.0, 6, BAD).decision == "hold" and gate.cap == 6
    # the bad frame at 0.5 is still inside the 3-s window but was judged: only newer frames count
    assert interval(gate, 2.0, 6, GOOD).decision == "hold" and gate.last.num_frames == 1
    assert interval(gate, 3.0, 6, BAD).decision == "hold"  # a good judgment in between: the count starts over
    assert interval(gate, 4.0, 6, BAD).decision == "decrease" and gate.cap == 4  # floor(6 x 0.7)
    assert gate.adjustments == {"increase": 0, "decrease": 1, "hold": 3}


def test_with_decrease_after_2_a_judgment_without_frames_keeps_the_count():
    gate = aimd(initial_cap=6, decrease_after=2)
    gate.tick(6, 0.0)
    assert [interval(gate, 1.0, 6, BAD).decision, interval(gate, 2.0, 6).decision,
            interval(gate, 3.0, 6, BAD).decision] == ["hold", "hold", "decrease"]


def test_after_an_unconfirmed_slow_interval_a_rise_waits_for_a_whole_window_of_newer_frames():
    gate = aimd(initial_cap=4, latency_window_s=2.0, decrease_after=2)
    gate.tick(4, 0.0)
    decisions = [interval(gate, 1.0, 4, BAD).decision] + [interval(gate, float(s), 4, GOOD).decision for s in (2, 3)]
    assert decisions == ["hold", "hold", "increase"] and gate.cap == 5


def climb(gate: AIMDAdmission, start: int, end: int) -> list[str]:
    """One good interval per second in [start, end), live at the cap: the decisions."""
    return [interval(gate, float(second), gate.cap, GOOD).decision for second in range(start, end)]


def test_after_a_drop_the_cap_returns_below_the_failed_load_at_once_and_tries_that_load_after_probe_wait():
    gate = aimd(initial_cap=8, probe_wait_s=4.0, decrease_factor=0.5)
    gate.tick(8, 0.0)
    assert interval(gate, 1.0, 6, BAD).decision == "decrease" and gate.cap == 3  # live 6 was too much: the ceiling
    assert climb(gate, 2, 4) == ["increase", "increase"] and gate.cap == 5  # one window each, as before
    assert climb(gate, 4, 9) == ["hold", "hold", "hold", "increase", "hold"]  # 6 is a probe: 4 s of good frames
    assert gate.cap == 6


def test_a_failed_probe_doubles_the_wait_and_a_probe_that_holds_resets_it():
    gate = aimd(initial_cap=8, probe_wait_s=2.0, decrease_factor=0.5)
    gate.tick(4, 0.0)
    interval(gate, 1.0, 4, BAD)  # ceiling 4, cap 2
    assert climb(gate, 2, 5) == ["increase", "hold", "increase"] and gate.cap == 4  # 3 at once, 4 after 2 s
    assert interval(gate, 5.0, 4, BAD).decision == "decrease" and gate.cap == 2  # the probe failed: wait 4 s
    assert interval(gate, 6.0, 4, BAD).decision == "decrease"  # nobody left yet: no second doubling
    assert climb(gate, 7, 13) == ["increase", "hold", "hold", "hold", "increase", "hold"]  # 3, then 4 after 4 s
    assert climb(gate, 13, 16) == ["hold", "hold", "increase"] and gate.cap == 5  # 4 held for 4 s: probe 5
    assert climb(gate, 16, 18) == ["hold", "increase"] and gate.cap == 6  # the wait is back at 2 s


def test_probe_waits_stop_doubling_at_the_backoff_limit():
    gate = aimd(initial_cap=2, min_cap=2, probe_wait_s=1.0, decrease_factor=0.5)
    gate.tick(2, 0.0)
    interval(gate, 1.0, 3, BAD)  # ceiling 3
    now, waits = 2.0, []
    for _ in range(6):  # probe 3, fail, and again
        started = now
        while gate.cap < 3:
            interval(gate, now, gate.cap, GOOD)
            now += 1.0
        waits.append(now - started)
        interval(gate, now, 3, BAD)
        now += 1.0
    assert waits == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]  # 1 s x MAX_PROBE_BACKOFF at most
