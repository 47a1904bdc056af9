"""The user's uncommitted speech, at 16 kHz, addressed in ms of the session's input stream."""

from __future__ import annotations

import numpy as np

RATE = 16000


class SpeechBuffer:
    """Audio appended since the last commit or clear, at most `max_s` seconds of it; `take(from_ms)`
    commits what came from `from_ms` on (`peek(from_ms)` reads it and keeps it) (ms since the session's first audio, the turn detector's clock);
    `forget_before(ms)` drops whole appends that ended before `ms` (silence nobody will commit)."""

    def __init__(self, max_s: float) -> None:
        self.max_samples = int(max_s * RATE)
        self._chunks: list[np.ndarray] = []
        self.num_samples = 0
        self.start_ms = 0.0  # stream time of the first buffered sample
        self.total_ms = 0.0  # stream time of the end of the buffer

    def room(self, num_samples: int) -> bool:
        return self.num_samples + num_samples <= self.max_samples

    def append(self, pcm16k: np.ndarray) -> None:
        if not self.room(len(pcm16k)):
            raise ValueError(f"the input audio buffer holds at most {self.max_samples / RATE:g} s; commit or clear it")
        self._chunks.append(pcm16k)
        self.num_samples += len(pcm16k)
        self.total_ms += 1000.0 * len(pcm16k) / RATE

    def peek(self, from_ms: float | None = None) -> np.ndarray:
        """Everything buffered (from `from_ms` on, if given)."""
        audio = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)
        if from_ms is not None:
            audio = audio[max(0, int((from_ms - self.start_ms) * RATE / 1000)):]
        return audio

    def take(self, from_ms: float | None = None) -> np.ndarray:
        """Everything buffered (from `from_ms` on, if given); the buffer then starts empty."""
        audio = self.peek(from_ms)
        self.clear()
        return audio

    def forget_before(self, ms: float) -> None:
        while self._chunks and self.start_ms + 1000.0 * len(self._chunks[0]) / RATE <= ms:
            chunk = self._chunks.pop(0)
            self.num_samples -= len(chunk)
            self.start_ms += 1000.0 * len(chunk) / RATE

    def clear(self) -> None:
        self._chunks = []
        self.num_samples = 0
        self.start_ms = self.total_ms
