"""One session's interaction state, and the one place that publishes it: the next-use hint and the reply's playback."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.interaction.next_use import NextUseEstimator
from orchestrator.interaction.playback_board import PlaybackBoard


class InteractionState:
    """The single owner of a session's interaction state: its NextUseEstimator and the current reply's
    playback position (`playback`: started, the clock time its delivered audio runs out, and the ms of it
    delivered: 0 as a turn starts where `tracks_delivery`, else None, and no stage then counts audio it
    produced beyond it).

    Each interaction fact has one method (`on_user_input`, `on_speech_started`, `on_turn_started`,
    `on_generation_end`, `on_playback`), called on the event loop, that updates the state and then
    publishes the session's NextUseHint on `board` exactly once, under `thinker_id()` (the context's
    current thinker request; it changes when the context is rebuilt). A playback that has not started
    leaves the hint as it was and publishes none. A turn's start resets the playback position (its reply
    has played nothing yet); every playback fact then calls `on_reply_playback`, which republishes the
    active reply's per-request states from `playback`. Nobody else writes the hint.
    """

    def __init__(self, next_use: NextUseEstimator, board: PlaybackBoard, clock: Callable[[], float],
                 thinker_id: Callable[[], str], on_reply_playback: Callable[[], None] = lambda: None) -> None:
        self.next_use = next_use
        self.tracks_delivery = False  # a controller sets it: its PlaybackTracker reports what it delivers
        self.playback: tuple[bool, float, float | None] = (False, 0.0, None)
        self._board, self._clock, self._thinker_id = board, clock, thinker_id
        self._on_reply_playback = on_reply_playback

    @property
    def lead_s(self) -> float:
        """The expected time from the user's speech start to the turn that needs the context."""
        return self.next_use.lead_s

    def on_user_input(self) -> None:
        """The user's next message began as an item (speech has `on_speech_started`)."""
        self.next_use.on_user_input(self._clock())
        self._publish_next_use()

    def on_speech_started(self) -> None:
        self.next_use.on_speech_started(self._clock())
        self._publish_next_use()

    def on_turn_started(self) -> None:
        self.playback = (False, 0.0, 0.0 if self.tracks_delivery else None)
        self.next_use.on_turn_started(self._clock())
        self._publish_next_use()

    def on_generation_end(self) -> None:
        self.next_use.on_generation_end(self._clock())
        self._publish_next_use()

    def on_playback(self, started: bool, drained_at: float, delivered_ms: float | None) -> None:
        """The current reply's playback: started, the clock time its delivered audio runs out, and how much
        of its audio was delivered (None: its delivery is not tracked)."""
        self.playback = (started, drained_at, delivered_ms)
        if started:
            self.next_use.on_playback(drained_at)
            self._publish_next_use()
        self._on_reply_playback()

    def _publish_next_use(self) -> None:
        self._board.publish_next_use(self._thinker_id(), self.next_use.hint(self._clock()))
