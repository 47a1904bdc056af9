import numpy as np
import pytest

from monitor import (
    SpeechLull,
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    SpeechStopped,
    TurnDetectionConfig,
    TurnDetector,
)

WINDOW = np.zeros(512, dtype=np.float32)


def run_windows(detector: TurnDetector, num_windows: int) -> list[tuple[int, object]]:
    """Feed one window at a time; return (index of the deciding window, event)."""
    return [(k, e) for k in range(num_windows) for e in detector.feed(WINDOW)]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"threshold": 0.0}, "threshold"),
        ({"threshold": 1.0}, "threshold"),
        ({"prefix_padding_ms": -1}, "prefix_padding_ms"),
        ({"silence_duration_ms": -32}, "silence_duration_ms"),
        ({"max_pause_ms": -1}, "max_pause_ms"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        TurnDetectionConfig(**kwargs)


def test_exit_threshold_is_silero_hysteresis_floored_at_half():
    assert TurnDetectionConfig(threshold=0.5).exit_threshold == pytest.approx(0.35)
    assert TurnDetectionConfig(threshold=0.2).exit_threshold == pytest.approx(0.1)


def test_known_script_gives_exact_edges(scripted_vad):
    # 20 silent windows, 30 speech windows (onset 20 * 32 = 640 ms), 20 silent (from 1600 ms).
    script = [0.0] * 20 + [0.9] * 30 + [0.1] * 20
    detector = TurnDetector(scripted_vad(script), TurnDetectionConfig())
    events = run_windows(detector, len(script))
    # Start decided on the onset window; a lull once silence covers 100 ms (window 53 ends at
    # 1728 ms = 1600 + 128), a pause once it covers 200 ms (window 56 ends at 1824 ms = 1600 + 224);
    # stop once it covers 500 ms: window 65 ends at 2112 ms = 1600 + 512 (16 windows; 15 would be 480 ms).
    assert events == [(20, SpeechStarted(640 - 300)), (53, SpeechLull(1600)), (56, SpeechPaused(1600)),
                      (65, SpeechStopped(1600))]
    assert not detector.is_speaking


def test_prefix_padding_clamps_at_zero(scripted_vad):
    detector = TurnDetector(scripted_vad([0.0] * 3 + [0.9]), TurnDetectionConfig(prefix_padding_ms=300))
    assert run_windows(detector, 4) == [(3, SpeechStarted(0))]  # onset 96 ms - 300 -> 0


def test_blip_shorter_than_silence_duration_does_not_end_speech(scripted_vad):
    # Speech 0..320 ms, 10 silent windows (320 ms < 500, but past 200: a pause), speech again
    # (it resumes at 640 ms), then real silence at 960 ms.
    script = [0.9] * 10 + [0.1] * 10 + [0.9] * 10 + [0.1] * 16
    detector = TurnDetector(scripted_vad(script), TurnDetectionConfig(prefix_padding_ms=0))
    assert run_windows(detector, len(script)) == [
        (0, SpeechStarted(0)), (13, SpeechLull(320)), (16, SpeechPaused(320)), (20, SpeechResumed(640)),
        (33, SpeechLull(960)), (36, SpeechPaused(960)), (45, SpeechStopped(960))]


def test_a_silence_shorter_than_the_pause_lulls_and_resumes_without_an_event(scripted_vad):
    script = [0.9] * 2 + [0.1] * 6 + [0.9] * 2
    detector = TurnDetector(scripted_vad(script), TurnDetectionConfig(prefix_padding_ms=0))
    # 192 ms of silence: a lull at 128 ms, no pause
    assert run_windows(detector, len(script)) == [(0, SpeechStarted(0)), (5, SpeechLull(64))]


def test_a_silence_shorter_than_the_lull_gives_no_event(scripted_vad):
    script = [0.9] * 2 + [0.1] * 3 + [0.9] * 2
    detector = TurnDetector(scripted_vad(script), TurnDetectionConfig(prefix_padding_ms=0))
    assert run_windows(detector, len(script)) == [(0, SpeechStarted(0))]  # 96 ms < 100


@pytest.mark.parametrize(("silence_ms", "max_pause_ms", "pause_ms"),
                         [(500, 200, 200), (300, 200, 150), (2000, 200, 200), (0, 200, 0), (500, 160, 160)])
def test_speech_pauses_at_half_the_stopping_silence_or_the_most_pause_whichever_is_less(silence_ms, max_pause_ms,
                                                                                         pause_ms):
    config = TurnDetectionConfig(silence_duration_ms=silence_ms, max_pause_ms=max_pause_ms)
    assert (config.pause_ms, config.lull_ms) == (pause_ms, pause_ms / 2)


def test_a_pause_in_the_window_that_would_lull_replaces_the_lull(scripted_vad):
    script = [0.9] * 2 + [0.1] * 20
    detector = TurnDetector(scripted_vad(script), TurnDetectionConfig(prefix_padding_ms=0, max_pause_ms=32))
    # lull_ms 16 and pause_ms 32 are both covered by the first silent window
    assert run_windows(detector, len(script)) == [(0, SpeechStarted(0)), (2, SpeechPaused(64)),
                                                  (17, SpeechStopped(64))]


def test_a_silence_lulls_and_pauses_once_however_long_it_lasts(scripted_vad):
    script = [0.9] * 2 + [0.1] * 40
    detector = TurnDetector(scripted_vad(script), TurnDetectionConfig(prefix_padding_ms=0, silence_duration_ms=1000))
    events = run_windows(detector, len(script))
    assert events == [(0, SpeechStarted(0)), (5, SpeechLull(64)), (8, SpeechPaused(64)), (33, SpeechStopped(64))]


def test_hysteresis_band_neither_starts_nor_cancels_silence(scripted_vad):
    # 0.4 is between exit 0.35 and threshold 0.5.
    script = [0.4] * 5 + [0.9] * 5 + [0.4] * 20 + [0.1] * 2 + [0.4] * 14
    detector = TurnDetector(scripted_vad(script), TurnDetectionConfig(prefix_padding_ms=0))
    # 0.4 before speech does not start it; 0.4 during speech does not start silence;
    # silence starts at window 30 (960 ms) and 0.4 afterwards does not cancel it.
    assert run_windows(detector, len(script)) == [
        (5, SpeechStarted(160)), (33, SpeechLull(960)), (36, SpeechPaused(960)), (45, SpeechStopped(960))]


def test_zero_silence_duration_stops_on_first_silent_window(scripted_vad):
    detector = TurnDetector(scripted_vad([0.9, 0.9, 0.1]), TurnDetectionConfig(silence_duration_ms=0))
    assert run_windows(detector, 3) == [(0, SpeechStarted(0)), (2, SpeechStopped(64))]


class MeanVAD:
    """Probability = the window's mean sample: lets the audio itself carry the script."""

    def __init__(self) -> None:
        self.num_windows = 0

    def speech_probability(self, window: np.ndarray) -> float:
        self.num_windows += 1
        return float(window.mean())

    def reset(self) -> None:
        self.num_windows = 0


@pytest.mark.parametrize("chunk", [100, 333, 512, 700, 4096])
def test_chunk_sizes_that_do_not_divide_512_give_the_same_events(chunk):
    levels = [0.0] * 7 + [0.9] * 12 + [0.0] * 20 + [0.8] * 3
    audio = np.repeat(np.array(levels, dtype=np.float32), 512)
    detector = TurnDetector(MeanVAD(), TurnDetectionConfig(prefix_padding_ms=100))
    events = [e for i in range(0, len(audio), chunk) for e in detector.feed(audio[i:i + chunk])]
    # Onset 7 * 32 = 224 ms; silence from 19 * 32 = 608 ms; onset again at 39 * 32 = 1248 ms.
    assert events == [SpeechStarted(124), SpeechLull(608), SpeechPaused(608), SpeechStopped(608), SpeechStarted(1148)]
    assert detector.vad.num_windows == len(levels)


def test_remainder_waits_for_more_audio_and_counts_in_the_clock(scripted_vad):
    vad = scripted_vad([0.9])
    detector = TurnDetector(vad)
    assert detector.feed(np.zeros(500, dtype=np.float32)) == []
    assert vad.num_calls == 0 and detector.audio_ms == pytest.approx(31.25)
    assert detector.feed(np.zeros(12, dtype=np.float32)) == [SpeechStarted(0)]
    assert detector.audio_ms == 32


def test_reset_starts_a_new_stream(scripted_vad):
    vad = scripted_vad([0.9, 0.0, 0.9])
    detector = TurnDetector(vad, TurnDetectionConfig(prefix_padding_ms=0))
    detector.feed(np.zeros(512 + 100, dtype=np.float32))
    detector.reset()
    assert (detector.is_speaking, detector.audio_ms, vad.num_resets) == (False, 0, 2)
    # The 100 buffered samples are gone: the next window is a fresh 512 at 0 ms.
    assert run_windows(detector, 2) == [(1, SpeechStarted(32))]


def test_rejects_non_mono_audio(scripted_vad):
    with pytest.raises(ValueError, match="1-D"):
        TurnDetector(scripted_vad([])).feed(np.zeros((2, 512), dtype=np.float32))
