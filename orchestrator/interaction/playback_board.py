"""The stages' view of the conversation: per-request playback state, published by turns."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from stages.interaction import InteractionView, PlaybackState

NOT_STARTED = PlaybackState(started=False, drained_at=0.0)
BoardChange = tuple  # (method name, request id, value...): one write to a PlaybackBoard


@dataclass(frozen=True, slots=True)
class NextUseHint:
    """When a session's context is needed next: now if `needed_now` (the user speaks or a
    turn generates), else when its delivered audio runs out (`drained_at`, not before
    now) plus `reply_gap_s`."""

    drained_at: float
    reply_gap_s: float
    needed_now: bool = False

    def at(self, now: float) -> float:
        return now if self.needed_now else max(now, self.drained_at) + self.reply_gap_s


class PlaybackBoard(InteractionView):
    """Request id -> PlaybackState and NextUseHint, written on the event loop, read by engine threads.

    Writes replace whole immutable values and reads are single dict lookups, so no
    lock is needed: a reader sees the value before or after a write, never a mix.
    Once `record_changes` is called, every write is also journalled, for `drain_changes`
    to hand to copies of the board (in stage processes) that `apply_changes` replays.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._states: dict[str, PlaybackState] = {}
        self._next_use: dict[str, NextUseHint] = {}
        self._journal: deque[BoardChange] | None = None

    def playback(self, request_id: str) -> PlaybackState | None:
        return self._states.get(request_id)

    def next_use(self, request_id: str) -> float | None:
        hint = self._next_use.get(request_id)
        return None if hint is None else hint.at(self.clock())

    def publish(self, request_id: str, state: PlaybackState) -> None:
        self._states[request_id] = state
        self._record(("publish", request_id, state))

    def publish_next_use(self, request_id: str, hint: NextUseHint) -> None:
        self._next_use[request_id] = hint
        self._record(("publish_next_use", request_id, hint))

    def withdraw(self, request_id: str) -> None:
        self._states.pop(request_id, None)
        self._next_use.pop(request_id, None)
        self._record(("withdraw", request_id))

    def snapshot(self) -> list[BoardChange]:
        """The board as writes that rebuild it in an empty copy (a stage process that was restarted)."""
        return ([("publish", rid, state) for rid, state in list(self._states.items())]
                + [("publish_next_use", rid, hint) for rid, hint in list(self._next_use.items())])

    def record_changes(self) -> None:
        """Journal every write from now on (call before the first write that copies must see)."""
        self._journal = deque()

    def drain_changes(self) -> list[BoardChange]:
        """The writes journalled since the last drain, oldest first (callable from one other thread:
        the deque's appends and pops are atomic)."""
        journal = self._journal
        return [journal.popleft() for _ in range(len(journal))] if journal else []

    def apply_changes(self, changes: list[BoardChange]) -> None:
        for method, *args in changes:
            getattr(self, method)(*args)

    def _record(self, change: BoardChange) -> None:
        if self._journal is not None:
            self._journal.append(change)


def reply_states(started: bool, drained_at: float, frame_ms: float, queued_frames: int,
                 chunked_frames: int, delivered_ms: float | None) -> tuple[PlaybackState, ...]:
    """(thinker, talker, vocoder) states of one reply whose delivered audio runs out at `drained_at`.

    The vocoder's buffer P is the delivered, unplayed audio. The talker's adds the
    `queued_frames` the vocoder holds and will turn into audio without more talker work;
    frames the talker made that wait for their vocoder chunk to fill do not count, as
    they play only once more talker work completes the chunk. The thinker's adds
    `chunked_frames`: those frames and the frames of the text the talker has not voiced
    yet, as far as they fill whole vocoder chunks (they need talker work, no more text). The vocoder's
    counts the `delivered_ms` of audio, for the stage to add the frames it decoded since (see PlaybackState).
    """
    talker_queue_ms = queued_frames * frame_ms
    thinker_queue_ms = (queued_frames + chunked_frames) * frame_ms
    return (PlaybackState(started, drained_at, thinker_queue_ms), PlaybackState(started, drained_at, talker_queue_ms),
            PlaybackState(started, drained_at, 0.0, delivered_ms))
