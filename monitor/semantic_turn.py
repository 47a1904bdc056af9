"""Semantic turn detection: the VAD finds pauses, an end-of-turn model decides which end the turn."""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from monitor.silero import WINDOW_SAMPLES, VoiceConfidence
from monitor.smart_turn import WINDOW_SAMPLES as MODEL_SAMPLES
from monitor.smart_turn import TurnCompletion
from monitor.turn_detector import (
    WINDOW_MS,
    SpeechLull,
    SpeechPaused,
    SpeechStarted,
    TurnDetectionConfig,
    TurnDetector,
    TurnEvent,
)

MIN_PAUSE_MS = 200  # the first pause the model is asked about (Smart Turn's authors advise a 200 ms VAD stop)
# eagerness -> (probability that ends the turn, silence that ends it whatever the model says, ms). OpenAI
# documents maxima for the silence (low 8 s, medium 4 s, high 2 s). low and medium wait that long for a user
# who may go on. auto (the default) and high wait no longer than server_vad's default 500 ms: Smart Turn
# misjudges some plain questions as unfinished (q_sky: p <= 0.04 for 1.6 s), and 4 s of dead air after a
# question costs more than the early endings the model gives.
EAGERNESS = {"low": (0.7, 8000), "medium": (0.5, 4000), "high": (0.3, 500), "auto": (0.5, 500)}
EAGERNESS_NAMES = tuple(EAGERNESS)


@dataclass(frozen=True)
class SemanticTurnConfig:
    """semantic_vad settings. eagerness: low lets the user take their time, high ends turns quickly, auto
    ends them when Smart Turn is sure, else after server_vad's 500 ms. threshold, prefix_padding_ms and
    max_pause_ms are the VAD's, as in TurnDetectionConfig."""

    eagerness: str = "auto"
    threshold: float = 0.5
    prefix_padding_ms: int = 300
    max_pause_ms: int = 200

    def __post_init__(self) -> None:
        if self.eagerness not in EAGERNESS_NAMES:
            raise ValueError(f"eagerness must be one of {EAGERNESS_NAMES}, got {self.eagerness!r}")

    @property
    def completion_threshold(self) -> float:
        """A model probability at or above this ends the turn at a pause."""
        return EAGERNESS[self.eagerness][0]

    @property
    def silence_duration_ms(self) -> int:
        """The fallback: silence that ends the turn whatever the model says."""
        return EAGERNESS[self.eagerness][1]

    @property
    def vad(self) -> TurnDetectionConfig:
        return TurnDetectionConfig(self.threshold, self.prefix_padding_ms, self.silence_duration_ms, self.max_pause_ms)


class SemanticTurnDetector(TurnDetector):
    """Speech start, pause and stop events like TurnDetector's, with the turn's end judged by `model`.

    The VAD decides speech and silence by TurnDetector's rules, with silence_duration_ms the eagerness'
    fallback timeout (so SpeechPaused comes at its pause_ms, SpeechStopped at all of it). In addition, when
    a silence run reaches MIN_PAUSE_MS, and again each time it doubles (400, 800, ... ms), `model` is asked
    about the turn's audio so far (from the onset less the prefix padding, at most the last 8 s, through
    the current window); a probability >= the eagerness' threshold ends the speech there, at the run's
    start (a stop in the window that would lull or pause speech replaces that event). A model call costs tens of ms:
    `decide` (and `feed`) belong on a worker thread (`decides_inline` is False).
    """

    decides_inline = False

    def __init__(self, vad: VoiceConfidence, model: TurnCompletion, config: SemanticTurnConfig = SemanticTurnConfig()):
        self.model, self.semantic = model, config
        self.num_model_calls = 0
        super().__init__(vad, config.vad)

    def reset(self) -> None:
        super().reset()
        self._windows: deque[np.ndarray] = deque(maxlen=MODEL_SAMPLES // WINDOW_SAMPLES)
        self._turn_windows = 0  # windows of the current turn (onset less prefix padding) held in _windows
        self._next_check_ms = MIN_PAUSE_MS

    def _step(self, window: np.ndarray, probability: float) -> TurnEvent | None:
        self._windows.append(window)
        self._turn_windows = min(self._turn_windows + 1, self._windows.maxlen)
        return super()._step(window, probability)

    def _maybe_start(self, probability: float, start_ms: int) -> SpeechStarted | None:
        event = super()._maybe_start(probability, start_ms)
        if event is not None:
            padding_windows = -(-(start_ms - event.audio_start_ms) // WINDOW_MS)
            self._turn_windows = min(padding_windows + 1, len(self._windows))
        return event

    def _maybe_stop(self, probability: float, start_ms: int) -> TurnEvent | None:
        event = super()._maybe_stop(probability, start_ms)
        silence_start = self._silence_start_ms
        if silence_start is None:
            self._next_check_ms = MIN_PAUSE_MS
        pausing = event is None or isinstance(event, (SpeechLull, SpeechPaused))
        if not pausing or silence_start is None or start_ms + WINDOW_MS - silence_start < self._next_check_ms:
            return event
        self._next_check_ms *= 2
        self.num_model_calls += 1
        if self.model.probability(self.turn_audio()) >= self.semantic.completion_threshold:
            self._next_check_ms = MIN_PAUSE_MS
            return self._stop(silence_start)
        return event

    def turn_audio(self) -> np.ndarray:
        """The current turn's audio as the model hears it (see the class doc)."""
        windows = list(self._windows)[len(self._windows) - self._turn_windows:]
        return np.concatenate(windows) if windows else np.zeros(0, np.float32)
