"""Shared fakes for monitor tests: a hand-moved clock and a scripted VAD."""
import numpy as np
import pytest


class FakeClock:
    """Clock in seconds that only moves when a test sets `t`."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class ScriptedVAD:
    """VoiceConfidence that returns `probabilities` in order, one per window."""

    def __init__(self, probabilities: list[float]) -> None:
        self.probabilities = list(probabilities)
        self.num_calls = 0
        self.num_resets = 0

    def speech_probability(self, window: np.ndarray) -> float:
        assert window.shape == (512,) and window.dtype == np.float32
        self.num_calls += 1
        return self.probabilities[self.num_calls - 1]

    def reset(self) -> None:
        self.num_resets += 1


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def scripted_vad():
    """Factory: scripted_vad([p0, p1, ...]) -> ScriptedVAD."""
    return ScriptedVAD
