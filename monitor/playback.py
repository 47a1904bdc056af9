"""Playback progress of one session's reply audio, as the server can know it."""
from __future__ import annotations

from typing import Callable


class PlaybackTracker:
    """Delivered vs played reply audio of one session, one response item at a time.

    Times come from the injected clock (seconds); audio amounts are ms.

    What is assumed:
      - `delivered(ms)` is called when a chunk of the current item's audio is
        sent to the client; the client receives it at that instant.
      - Real-time model: the client starts playing at the first delivery,
        plays at 1x while it holds unplayed audio, and when it runs dry waits
        and resumes the moment the next chunk arrives. Network latency and
        client-side jitter buffers are ignored.
      - Until the client has sent an ack, played progress is the real-time
        model's. From the first ack on (for the rest of the session) played
        progress is the last acked position of the current item: acks are the
        truth, never extrapolated, never decreasing, clamped to delivered.
      - Underruns always come from the real-time model, acks or not: an
        underrun is a gap between the moment the model's buffer ran empty and
        the next delivery of the same item (generation was still unfinished,
        since audio kept coming). Gaps closed by a delivery are counted in
        `num_underruns`, `underrun_ms_total`, `max_underrun_ms` (session
        totals); an open gap is `stall_ms(now)`. Silence after the last chunk
        is not an underrun, nor is the wait for an item's first audio.
      - `start_item` assumes the previous item's audio finished playing or
        was cleared by the client (barge-in); it does not queue behind it.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.is_ack_driven = False
        self.num_underruns = 0
        self.underrun_ms_total = 0.0
        self.max_underrun_ms = 0.0
        self._reset_item(None)

    def _reset_item(self, item_id: str | None) -> None:
        self.item_id = item_id
        self.is_generating = item_id is not None
        self.delivered_ms = 0.0
        self._acked_ms = 0.0
        self._drained_at: float | None = None  # real-time model: clock time its buffer empties

    def start_item(self, item_id: str) -> None:
        """Begin a new response item; its audio will follow via `delivered`."""
        self._reset_item(item_id)

    def delivered(self, ms: float) -> None:
        """Record `ms` of the current item's audio sent to the client now."""
        if not self.is_generating:
            raise RuntimeError("delivered() needs a started, unfinished item")
        if ms < 0:
            raise ValueError(f"ms must be >= 0, got {ms}")
        now = self.clock()
        if self._drained_at is None:
            self._drained_at = now
        elif self._drained_at < now:
            self._record_underrun((now - self._drained_at) * 1000)
            self._drained_at = now
        self._drained_at += ms / 1000
        self.delivered_ms += ms

    def _record_underrun(self, gap_ms: float) -> None:
        self.num_underruns += 1
        self.underrun_ms_total += gap_ms
        self.max_underrun_ms = max(self.max_underrun_ms, gap_ms)

    def ack(self, played_ms: float, item_id: str | None = None) -> bool:
        """Client reports `played_ms` of the item played (default: current item).

        Returns False, changing nothing, for an ack of another item (stale).
        """
        if item_id is not None and item_id != self.item_id:
            return False
        self.is_ack_driven = True
        self._acked_ms = min(max(self._acked_ms, played_ms), self.delivered_ms)
        return True

    def finish_generation(self) -> None:
        """The current item's audio is complete; no more deliveries."""
        self.is_generating = False

    def truncate(self, played_ms: float | None = None) -> float:
        """Playback of the current item was cut (barge-in) at `played_ms`
        (default: `played_ms(now)`); audio beyond it is discarded and
        generation ends. Returns the truncation point, clamped to delivered."""
        now = self.clock()
        cut_ms = self.played_ms(now) if played_ms is None else min(max(played_ms, 0.0), self.delivered_ms)
        self.delivered_ms = self._acked_ms = cut_ms
        self._drained_at = now
        self.is_generating = False
        return cut_ms

    @property
    def first_audio_sent(self) -> bool:
        """Some audio of the current item has been delivered."""
        return self.delivered_ms > 0

    def played_ms(self, now: float | None = None) -> float:
        """Audio of the current item played by `now` (default: clock())."""
        if self.is_ack_driven:
            return self._acked_ms
        return self.delivered_ms - self._realtime_buffer_ms(now)

    def buffer_ms(self, now: float | None = None) -> float:
        """Delivered but unplayed audio at `now`, >= 0."""
        return self.delivered_ms - self.played_ms(now)

    def is_playing(self, now: float | None = None) -> bool:
        """The client holds unplayed audio of the current item at `now`."""
        return self.buffer_ms(now) > 0

    def stall_ms(self, now: float | None = None) -> float:
        """Length of the open underrun at `now` (real-time model), else 0."""
        if not self.is_generating or self._drained_at is None:
            return 0.0
        return max(0.0, (self._now(now) - self._drained_at) * 1000)

    def _realtime_buffer_ms(self, now: float | None) -> float:
        if self._drained_at is None:
            return 0.0
        return min(self.delivered_ms, max(0.0, (self._drained_at - self._now(now)) * 1000))

    def _now(self, now: float | None) -> float:
        return self.clock() if now is None else now
