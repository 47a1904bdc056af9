import pytest

from monitor import PlaybackTracker


def test_realtime_progress_and_underruns_for_a_known_delivery_pattern(clock):
    tracker = PlaybackTracker(clock)
    tracker.start_item("a")
    assert not tracker.first_audio_sent and tracker.buffer_ms() == 0
    clock.t = 1.0
    tracker.delivered(200)  # playing from 1.0; buffer runs dry at 1.2
    clock.t = 1.1
    tracker.delivered(200)  # dry at 1.4
    assert tracker.played_ms() == pytest.approx(100)
    assert tracker.buffer_ms() == pytest.approx(300)
    clock.t = 1.45
    assert tracker.stall_ms() == pytest.approx(50)  # open gap since 1.4
    clock.t = 1.5
    tracker.delivered(100)  # gap 1.4 -> 1.5 = 100 ms; dry at 1.6
    assert tracker.buffer_ms(1.55) == pytest.approx(50)
    clock.t = 2.0
    tracker.delivered(300)  # gap 1.6 -> 2.0 = 400 ms; dry at 2.3
    assert (tracker.num_underruns, tracker.underrun_ms_total, tracker.max_underrun_ms) == (
        2, pytest.approx(500), pytest.approx(400))
    clock.t = 2.1
    tracker.finish_generation()
    assert tracker.played_ms() == pytest.approx(600)  # 800 delivered - 200 buffered
    assert tracker.is_playing()
    clock.t = 3.0
    # Drained after generation finished: not an underrun, not a stall.
    assert (tracker.played_ms(), tracker.buffer_ms(), tracker.is_playing(), tracker.stall_ms()) == (800, 0, False, 0)
    assert tracker.num_underruns == 2


def test_realtime_played_never_exceeds_delivered_nor_goes_negative(clock):
    tracker = PlaybackTracker(clock)
    tracker.start_item("a")
    clock.t = 5.0
    tracker.delivered(100)
    assert tracker.played_ms(4.0) == 0  # a query before the delivery
    assert tracker.played_ms(60.0) == 100


def test_acks_drive_progress_monotonic_and_clamped(clock):
    tracker = PlaybackTracker(clock)
    tracker.start_item("a")
    tracker.delivered(500)
    assert tracker.ack(100)
    clock.t = 10.0
    assert tracker.played_ms() == 100  # no extrapolation between acks
    assert tracker.buffer_ms() == 400
    tracker.ack(50)
    assert tracker.played_ms() == 100  # never decreases
    tracker.ack(900)
    assert tracker.played_ms() == 500  # clamped to delivered
    assert not tracker.is_playing()


def test_stale_ack_for_another_item_is_ignored(clock):
    tracker = PlaybackTracker(clock)
    tracker.start_item("a")
    tracker.delivered(500)
    tracker.ack(300, item_id="a")
    tracker.start_item("b")
    tracker.delivered(400)
    assert not tracker.ack(300, item_id="a")
    assert tracker.played_ms() == 0  # ack-driven for the rest of the session; b not acked yet
    assert tracker.ack(250, item_id="b") and tracker.buffer_ms() == 150


def test_acks_do_not_change_underrun_accounting(clock):
    tracker = PlaybackTracker(clock)
    tracker.start_item("a")
    tracker.delivered(100)
    tracker.ack(100)
    clock.t = 0.3
    tracker.delivered(100)  # real-time model: dry at 0.1, gap 200 ms
    assert (tracker.num_underruns, tracker.max_underrun_ms) == (1, pytest.approx(200))


def test_truncate_discards_unplayed_audio_and_ends_generation(clock):
    tracker = PlaybackTracker(clock)
    tracker.start_item("a")
    tracker.delivered(1000)
    clock.t = 0.3
    assert tracker.truncate() == pytest.approx(300)
    assert (tracker.delivered_ms, tracker.buffer_ms(), tracker.is_generating) == (pytest.approx(300), 0, False)
    tracker.start_item("b")
    tracker.delivered(1000)
    assert tracker.truncate(played_ms=2000) == 1000  # clamped to delivered


def test_deliveries_need_an_open_item(clock):
    tracker = PlaybackTracker(clock)
    with pytest.raises(RuntimeError):
        tracker.delivered(20)
    tracker.start_item("a")
    tracker.finish_generation()
    with pytest.raises(RuntimeError):
        tracker.delivered(20)


def test_first_delivery_of_an_item_is_not_an_underrun(clock):
    tracker = PlaybackTracker(clock)
    tracker.start_item("a")
    clock.t = 2.0  # 2 s to first audio
    assert tracker.stall_ms() == 0
    tracker.delivered(100)
    tracker.finish_generation()
    tracker.start_item("b")
    clock.t = 9.0
    tracker.delivered(100)
    assert tracker.num_underruns == 0
