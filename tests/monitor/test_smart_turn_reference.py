"""Our Smart Turn input against the reference: the features pipecat's own Smart Turn v3 analyzer computes
(its numpy port of the Whisper feature extractor the model was trained with), fed to the same ONNX file."""
import numpy as np
import pytest

from monitor import SmartTurn
from monitor.smart_turn import WINDOW_SAMPLES, model_input
from tests.conftest import read_fixture

whisper_features = pytest.importorskip("pipecat.audio.turn.smart_turn._whisper_features")


def reference_input(audio: np.ndarray) -> np.ndarray:
    """pipecat's LocalSmartTurnAnalyzerV3 preprocessing: the last 8 s, zero-padded in front, normalised."""
    audio = np.pad(audio[-WINDOW_SAMPLES:], (max(0, WINDOW_SAMPLES - len(audio)), 0))
    return whisper_features.compute_whisper_log_mel_features(audio, do_normalize=True)[None]


@pytest.mark.parametrize("clip, silence_ms", [("q_story_espeak_24k.wav", 400), ("librivox_austen_0870_24k.wav", 200),
                                              ("librivox_austen_0870_24k.wav", 2000)])
def test_our_features_and_probability_are_the_reference_ones(clip, silence_ms):
    audio = np.concatenate([np.zeros(4800, np.float32), read_fixture(clip), np.zeros(16 * silence_ms, np.float32)])
    ours, theirs = model_input(audio), reference_input(audio)
    assert ours.shape == theirs.shape == (1, 80, 800) and ours.dtype == theirs.dtype == np.float32
    assert np.abs(ours - theirs).max() <= 1e-6  # float32 spectra differ by ~1e-5
    session = SmartTurn()._session
    (reference,) = session.run(None, {"input_features": theirs})
    assert SmartTurn().probability(audio) == pytest.approx(float(reference.reshape(-1)[0]), abs=1e-4)
