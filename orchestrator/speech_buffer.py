"""The user's uncommitted speech, at 16 kHz, addressed in ms of the session's input stream."""

from __future__ import annotations

import numpy as np

RATE = 16000


class SpeechBuffer:
    """Audio appended since the last commit or clear; `take(from_ms)` commits what came from `from_ms`
    on (ms since the session's first audio, the turn detector's clock)."""

    def __init__(self) -> None:
        self._chunks: list[np.ndarray] = []
        self.start_ms = 0.0  # stream time of the first buffered sample
        self.total_ms = 0.0  # stream time of the end of the buffer

    def append(self, pcm16k: np.ndarray) -> None:
        self._chunks.append(pcm16k)
        self.total_ms += 1000.0 * len(pcm16k) / RATE

    @property
    def num_samples(self) -> int:
        return sum(len(c) for c in self._chunks)

    def take(self, from_ms: float | None = None) -> np.ndarray:
        """Everything buffered (from `from_ms` on, if given); the buffer then starts empty."""
        audio = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)
        if from_ms is not None:
            audio = audio[max(0, int((from_ms - self.start_ms) * RATE / 1000)):]
        self.clear()
        return audio

    def clear(self) -> None:
        self._chunks = []
        self.start_ms = self.total_ms
