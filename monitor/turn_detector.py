"""Turn detection: a speech start/stop state machine over 32 ms VAD windows."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from monitor.silero import SAMPLE_RATE, WINDOW_SAMPLES, VoiceConfidence

WINDOW_MS = WINDOW_SAMPLES * 1000 // SAMPLE_RATE
HYSTERESIS = 0.15


@dataclass(frozen=True)
class TurnDetectionConfig:
    """Server-VAD settings, named and defaulted like OpenAI Realtime `server_vad`.

    threshold: a window is speech when its probability >= threshold; in (0, 1).
    prefix_padding_ms: audio kept before the detected onset (>= 0).
    silence_duration_ms: silence that ends speech (>= 0).
    max_pause_ms: the most silence before speech counts as paused (>= 0; LiveServe's, not OpenAI's).
    """

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    max_pause_ms: int = 200

    def __post_init__(self) -> None:
        if not 0 < self.threshold < 1:
            raise ValueError(f"threshold must be in (0, 1), got {self.threshold}")
        for name in ("prefix_padding_ms", "silence_duration_ms", "max_pause_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")

    @property
    def exit_threshold(self) -> float:
        """Below this, a window counts as silence: threshold - 0.15 as in Silero's
        VADIterator, but never below threshold / 2 (so low thresholds still end)."""
        return max(self.threshold - HYSTERESIS, self.threshold / 2)

    @property
    def pause_ms(self) -> float:
        """Silence that pauses speech (SpeechPaused): half of silence_duration_ms, at most max_pause_ms."""
        return min(self.silence_duration_ms / 2, self.max_pause_ms)

    @property
    def lull_ms(self) -> float:
        """Silence after which the words so far may be all (SpeechLull): half of pause_ms."""
        return self.pause_ms / 2


@dataclass(frozen=True)
class SpeechStarted:
    """Speech began; audio_start_ms = onset - prefix padding, clamped at 0."""

    audio_start_ms: int


@dataclass(frozen=True)
class SpeechLull:
    """A silence run that started at audio_lull_ms has lasted the config's lull_ms: the words so far may be
    all, and transcribing them now saves the wait for the pause. SpeechPaused follows at pause_ms unless
    speech comes back first (then nothing follows: the lull ends with the run)."""

    audio_lull_ms: int


@dataclass(frozen=True)
class SpeechPaused:
    """A silence run that started at audio_pause_ms has lasted the config's pause_ms: unless speech
    resumes (SpeechResumed), SpeechStopped (the end of the turn) follows at silence_duration_ms."""

    audio_pause_ms: int


@dataclass(frozen=True)
class SpeechResumed:
    """Speech came back at audio_resume_ms in a silence that had paused it: the pause did not end the turn."""

    audio_resume_ms: int


@dataclass(frozen=True)
class SpeechStopped:
    """Speech ended; audio_end_ms = start of the silence that ended it."""

    audio_end_ms: int


TurnEvent = SpeechStarted | SpeechLull | SpeechPaused | SpeechResumed | SpeechStopped


class TurnDetector:
    """Speech start, pause, resume and stop events for one 16 kHz stream.

    Audio of any chunk length is cut into consecutive 512-sample windows; the
    remainder waits for the next `feed`. Times are ms of stream audio: window k
    spans [32k, 32k + 32). Rules (per window, probability p):
      - silent -> speaking at the first window with p >= threshold; its start
        is the onset.
      - while speaking, a window with p < exit_threshold starts a silence run
        (if none is open); p >= threshold cancels it (speech resumes, if the run
        had paused it); p in between does neither. Once the run covers the config's
        lull_ms, speech lulls; once it covers pause_ms, speech pauses (the turn may
        end here); each once per run, not in the window that ends it, and a pause in
        the window that would lull replaces the lull. Once the run covers
        silence_duration_ms, speech stops at the run's start.
    Events come out of the `feed` call whose audio completed the deciding
    window; more input never changes events already emitted. `decide` is cheap
    enough for an event loop where `decides_inline` (the VAD's scoring is the cost).
    """

    decides_inline = True

    def __init__(self, vad: VoiceConfidence, config: TurnDetectionConfig = TurnDetectionConfig()) -> None:
        self.vad = vad
        self.config = config
        self.reset()

    def reset(self) -> None:
        """Start a new stream: clock at 0, not speaking, VAD state cleared."""
        self.vad.reset()
        self._pending = np.zeros(0, dtype=np.float32)
        self._silence_start_ms: int | None = None
        self._paused = False  # SpeechPaused emitted for the open silence run
        self._lulled = False  # SpeechLull (or SpeechPaused) emitted for it
        self.num_windows = 0
        self.is_speaking = False

    @property
    def is_pausing(self) -> bool:
        """Speech is on, in a run of silence that ends it if it lasts (the words so far may be all)."""
        return self.is_speaking and self._silence_start_ms is not None

    @property
    def audio_ms(self) -> float:
        """Stream audio consumed so far, ms (windows plus the buffered remainder)."""
        return (self.num_windows * WINDOW_SAMPLES + len(self._pending)) * 1000 / SAMPLE_RATE

    def feed(self, pcm16k: np.ndarray) -> list[TurnEvent]:
        """Consume mono float32 16 kHz samples; return the events they decided."""
        windows = self.split(pcm16k)
        return self.decide(windows, [self.vad.speech_probability(window) for window in windows])

    def split(self, pcm16k: np.ndarray) -> np.ndarray:
        """The windows [k, 512] that mono float32 16 kHz samples complete, the rest kept for the next call.
        With `decide`, `feed` in two parts, so that the VAD's scoring can run elsewhere (VadBatcher): each
        split's windows must be decided, in order, before the next split's."""
        pcm = np.asarray(pcm16k, dtype=np.float32)
        if pcm.ndim != 1:
            raise ValueError(f"pcm16k must be 1-D mono, got shape {pcm.shape}")
        audio = np.concatenate([self._pending, pcm])
        num_full = len(audio) // WINDOW_SAMPLES
        self._pending = audio[num_full * WINDOW_SAMPLES:].copy()
        return audio[: num_full * WINDOW_SAMPLES].reshape(num_full, WINDOW_SAMPLES)

    def decide(self, windows: np.ndarray, probabilities: Sequence[float]) -> list[TurnEvent]:
        """The events of `split`'s windows, whose speech probabilities `self.vad` gave."""
        events = [self._step(window, float(probability)) for window, probability in zip(windows, probabilities)]
        return [event for event in events if event is not None]

    def _step(self, window: np.ndarray, probability: float) -> TurnEvent | None:
        start_ms = self.num_windows * WINDOW_MS
        self.num_windows += 1
        if self.is_speaking:
            return self._maybe_stop(probability, start_ms)
        return self._maybe_start(probability, start_ms)

    def _maybe_start(self, probability: float, start_ms: int) -> SpeechStarted | None:
        if probability < self.config.threshold:
            return None
        self.is_speaking = True
        return SpeechStarted(max(0, start_ms - self.config.prefix_padding_ms))

    def _maybe_stop(self, probability: float, start_ms: int) -> TurnEvent | None:
        if probability >= self.config.threshold:
            resumed = self._paused
            self._silence_start_ms, self._paused, self._lulled = None, False, False
            return SpeechResumed(start_ms) if resumed else None
        if probability < self.config.exit_threshold and self._silence_start_ms is None:
            self._silence_start_ms = start_ms
        silence_start = self._silence_start_ms
        if silence_start is None:
            return None
        silence_ms = start_ms + WINDOW_MS - silence_start
        if silence_ms >= self.config.silence_duration_ms:
            return self._stop(silence_start)
        if not self._paused and silence_ms >= self.config.pause_ms:
            self._paused = self._lulled = True
            return SpeechPaused(silence_start)
        if not self._lulled and silence_ms >= self.config.lull_ms:
            self._lulled = True
            return SpeechLull(silence_start)
        return None

    def _stop(self, silence_start: int) -> SpeechStopped:
        """End the speech at the start of the open silence run."""
        self._paused = self._lulled = False
        self.is_speaking = False
        self._silence_start_ms = None
        return SpeechStopped(silence_start)
