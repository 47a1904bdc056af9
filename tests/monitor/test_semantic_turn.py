"""SemanticTurnDetector on a scripted VAD and a scripted end-of-turn model: when the model is asked, what
it hears, and how its answer and the eagerness' fallback end the turn."""
import numpy as np
import pytest

from monitor import SemanticTurnConfig, SemanticTurnDetector, SpeechLull, SpeechPaused, SpeechStarted, SpeechStopped
from monitor.semantic_turn import MIN_PAUSE_MS
from monitor.turn_detector import TurnDetectionConfig


class ScriptedModel:
    """Answers `answers` in order (the last one from then on); records how many samples each call heard."""

    def __init__(self, *answers: float) -> None:
        self.answers, self.heard = list(answers), []

    def probability(self, audio: np.ndarray) -> float:
        self.heard.append(len(audio))
        return self.answers[min(len(self.heard), len(self.answers)) - 1]


def windows_of(detector, num_windows: int) -> list[tuple[int, object]]:
    """(index of the deciding window, event), windows k carrying the value k so the audio can be traced."""
    return [(k, e) for k in range(num_windows) for e in detector.feed(np.full(512, k, np.float32))]


def detector(scripted_vad, script, model, **config) -> SemanticTurnDetector:
    return SemanticTurnDetector(scripted_vad(script), model, SemanticTurnConfig(**config))


@pytest.mark.parametrize("eagerness, threshold, fallback_ms", [
    ("low", 0.7, 8000), ("medium", 0.5, 4000), ("auto", 0.5, 500), ("high", 0.3, 500)])
def test_eagerness_sets_the_models_threshold_and_the_fallback_silence(eagerness, threshold, fallback_ms):
    config = SemanticTurnConfig(eagerness)
    assert (config.completion_threshold, config.silence_duration_ms) == (threshold, fallback_ms)


def test_an_unknown_eagerness_is_refused_naming_it():
    with pytest.raises(ValueError, match="eagerness"):
        SemanticTurnConfig("eager")


def test_a_pause_the_model_calls_complete_ends_the_turn_at_the_minimum_pause(scripted_vad):
    # 10 speech windows from window 5 (onset 160 ms), then silence from window 15 (480 ms)
    model = ScriptedModel(0.8)
    events = windows_of(detector(scripted_vad, [0.0] * 5 + [0.9] * 10 + [0.1] * 20, model, prefix_padding_ms=64), 35)
    assert events == [(5, SpeechStarted(96)), (15 + 4 - 1, SpeechLull(480)),
                      (15 + -(-MIN_PAUSE_MS // 32) - 1, SpeechStopped(480))]  # a lull at 128 ms, the stop at 224
    # it heard the turn from the onset less the padding (window 3) through the deciding window (21)
    assert model.heard == [(21 - 3 + 1) * 512]


def test_a_pause_the_model_calls_incomplete_is_asked_again_as_it_doubles_then_the_fallback_ends_it(scripted_vad):
    model = ScriptedModel(0.4)  # under medium's 0.5 every time
    fallback_windows = 4000 // 32 + 1
    script = [0.9] * 10 + [0.1] * (fallback_windows + 5)
    events = windows_of(detector(scripted_vad, script, model, eagerness="medium"), 10 + fallback_windows + 5)
    stopped = [(k, e) for k, e in events if isinstance(e, SpeechStopped)]
    paused = [k for k, e in events if isinstance(e, SpeechPaused)]
    pause_windows = -(-TurnDetectionConfig().max_pause_ms // 32)
    assert stopped == [(10 + 4000 // 32 - 1, SpeechStopped(320))] and paused == [10 + pause_windows - 1]
    assert len(model.heard) == 5  # at 200, 400, 800, 1600 and 3200 ms of silence


def test_under_auto_a_pause_the_model_calls_incomplete_ends_the_turn_at_server_vads_500_ms(scripted_vad):
    model = ScriptedModel(0.4)
    events = windows_of(detector(scripted_vad, [0.9] * 10 + [0.1] * 40, model), 50)
    stopped = [(k, e) for k, e in events if isinstance(e, SpeechStopped)]
    assert stopped == [(10 + -(-500 // 32) - 1, SpeechStopped(320))]
    assert len(model.heard) == 2  # at 200 and 400 ms of silence


def test_speech_resuming_resets_the_pause_and_the_model_hears_at_most_8_s(scripted_vad):
    model = ScriptedModel(0.1, 0.9)
    script = [0.9] * 300 + [0.1] * 7 + [0.9] * 5 + [0.1] * 7  # 9.6 s of speech, a 224 ms pause, more, a pause
    events = windows_of(detector(scripted_vad, script, model), len(script))
    assert [e for _, e in events if isinstance(e, SpeechStopped)] == [SpeechStopped((300 + 7 + 5) * 32)]
    assert model.heard == [8 * 16000 // 512 * 512] * 2  # the last 8 s (250 windows) each time


def test_a_semantic_feed_is_not_run_on_an_event_loop(scripted_vad):
    assert detector(scripted_vad, [], ScriptedModel(0.5)).decides_inline is False
