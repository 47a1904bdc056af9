import numpy as np
import pytest

from monitor import (
    BargeIn,
    SessionMonitor,
    SpeechLull,
    SpeechPaused,
    SpeechStarted,
    SpeechStopped,
    TurnDetectionConfig,
    TurnDetector,
)

SPEECH = [0.9] * 5 + [0.0] * 16  # onset at 0 ms, stop after 512 ms of silence (21 windows)


def make_monitor(scripted_vad, clock, script):
    detector = TurnDetector(scripted_vad(script), TurnDetectionConfig(prefix_padding_ms=0))
    return SessionMonitor(detector, clock)


def feed_windows(monitor, num_windows):
    return monitor.feed_audio(np.zeros(512 * num_windows, dtype=np.float32))


def test_speech_without_a_reply_is_no_barge_in(scripted_vad, clock):
    monitor = make_monitor(scripted_vad, clock, SPEECH)
    clock.t = 4.0
    events = feed_windows(monitor, 21)
    assert events == [SpeechStarted(0), SpeechLull(160), SpeechPaused(160), SpeechStopped(160)]  # no BargeIn


def test_speech_while_reply_is_generated_before_first_audio_is_barge_in(scripted_vad, clock):
    monitor = make_monitor(scripted_vad, clock, SPEECH)
    monitor.playback.start_item("r1")
    assert feed_windows(monitor, 1) == [SpeechStarted(0), BargeIn(0, 0.0)]


def test_speech_while_reply_audio_is_unplayed_is_barge_in(scripted_vad, clock):
    monitor = make_monitor(scripted_vad, clock, SPEECH)
    monitor.playback.start_item("r1")
    monitor.playback.delivered(2000)
    monitor.playback.finish_generation()  # all generated, 2 s playing from t=0
    clock.t = 1.5
    events = feed_windows(monitor, 1)
    assert events == [SpeechStarted(0), BargeIn(0, pytest.approx(1500))]


def test_speech_after_reply_finished_playing_is_no_barge_in(scripted_vad, clock):
    monitor = make_monitor(scripted_vad, clock, SPEECH)
    monitor.playback.start_item("r1")
    monitor.playback.delivered(2000)
    monitor.playback.finish_generation()
    clock.t = 2.5  # played out at 2.0
    assert feed_windows(monitor, 1) == [SpeechStarted(0)]


def test_speech_after_truncated_reply_is_no_barge_in(scripted_vad, clock):
    monitor = make_monitor(scripted_vad, clock, SPEECH + SPEECH)
    monitor.playback.start_item("r1")
    monitor.playback.delivered(5000)
    clock.t = 1.0
    assert BargeIn(0, pytest.approx(1000)) in feed_windows(monitor, 21)
    monitor.playback.truncate()  # the caller cancels the reply
    assert feed_windows(monitor, 21) == [SpeechStarted(672), SpeechLull(832), SpeechPaused(832),
                                          SpeechStopped(832)]  # no BargeIn


def test_the_monitor_reports_playback_and_speech(scripted_vad, clock):
    monitor = make_monitor(scripted_vad, clock, SPEECH)
    playback = monitor.playback
    playback.start_item("r1")
    playback.delivered(200)  # dry at 0.2
    clock.t = 0.5
    playback.delivered(300)  # 300 ms underrun; dry at 0.8
    clock.t = 0.6
    assert feed_windows(monitor, 2) == [SpeechStarted(0), BargeIn(0, pytest.approx(300))]  # speaking over the reply
    assert playback.buffer_ms(0.7) == pytest.approx(100)
    assert (playback.first_audio_sent, playback.is_playing(0.7), playback.is_generating) == (True, True, True)
    assert monitor.detector.is_speaking
    assert (playback.num_underruns, playback.underrun_ms_total, playback.max_underrun_ms) == (
        1, pytest.approx(300), pytest.approx(300))
    assert playback.stall_ms(0.7) == 0
    assert playback.stall_ms(1.0) == pytest.approx(200)
