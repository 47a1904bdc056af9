"""Client-side playback of one reply's streamed audio, on a real-time clock."""

from __future__ import annotations

import time
from typing import Callable


class RealtimePlayer:
    """Plays one item's audio chunks at 1x as they arrive; it never plays ahead of the data.

    Times come from the injected `clock` (seconds); audio amounts are ms.

    The model:
      - Playback starts the moment the first chunk arrives (no jitter buffer).
      - Each chunk is appended to the buffer; playback runs at 1x while audio is buffered.
      - If the buffer ran dry before a chunk arrives, playback resumes at that arrival and
        the gap (dry moment -> arrival) is an underrun. The wait for the first chunk and
        the silence after the last one are not underruns.
      - `stop()` ends playback for good (a barge-in): unplayed audio is discarded, later
        chunks are ignored, and `played_ms` stays where it stopped.

    Every method takes `now` (default `clock()`); it must not be earlier than the latest
    `push`, since the model only moves forward.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.total_ms = 0.0
        self.underruns: list[float] = []
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self._drained_at: float | None = None  # clock time the buffered audio runs out
        self._stopped_played_ms = 0.0

    @property
    def is_stopped(self) -> bool:
        return self.stopped_at is not None

    @property
    def num_underruns(self) -> int:
        return len(self.underruns)

    @property
    def max_underrun_ms(self) -> float:
        return max(self.underruns, default=0.0)

    @property
    def underrun_ms_total(self) -> float:
        return sum(self.underruns, 0.0)

    @property
    def drained_at(self) -> float | None:
        """Clock time the audio received so far finishes playing (None before any chunk)."""
        return self._drained_at

    def push(self, ms: float, now: float | None = None) -> bool:
        """A chunk of `ms` audio arrived at `now`; False (and ignored) once stopped."""
        if ms < 0:
            raise ValueError(f"chunk duration must be >= 0 ms, got {ms}")
        if self.is_stopped:
            return False
        now = self.clock() if now is None else now
        if self._drained_at is None:
            self.started_at = self._drained_at = now
        elif self._drained_at < now:
            self.underruns.append((now - self._drained_at) * 1000)
            self._drained_at = now
        self._drained_at += ms / 1000
        self.total_ms += ms
        return True

    def buffered_ms(self, now: float | None = None) -> float:
        """Audio received but not yet played at `now`."""
        if self.is_stopped or self._drained_at is None:
            return 0.0
        now = self.clock() if now is None else now
        return max(0.0, (self._drained_at - now) * 1000)

    def played_ms(self, now: float | None = None) -> float:
        """Audio played by `now` (frozen once stopped)."""
        if self.is_stopped:
            return self._stopped_played_ms
        return self.total_ms - self.buffered_ms(now)

    def is_playing(self, now: float | None = None) -> bool:
        return self.buffered_ms(now) > 0

    def stop(self, now: float | None = None) -> float:
        """Stop playback at `now`, discarding what is buffered; returns played ms. Idempotent."""
        if not self.is_stopped:
            now = self.clock() if now is None else now
            self._stopped_played_ms = self.played_ms(now)
            self.stopped_at = now
        return self._stopped_played_ms
