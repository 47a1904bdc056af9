"""What a stage's scheduler may know of the conversation a request serves: numbers only.

The layer that sees the user (the orchestrator, from the runtime monitor) publishes
one `PlaybackState` per request; the stage never learns about sessions, audio or
the monitor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PlaybackState:
    """Where the user's playback stands relative to one request at one stage.

    - `started`: the reply this request serves has started playing.
    - `drained_at`: clock time (the stage clock) at which the audio already
      delivered to the user runs out, assuming it plays on at 1x.
    - `queued_ms`: audio, in ms, that later stages already hold for this reply
      but have not delivered (for a vocoder request 0; for a talker request, frames
      waiting in the vocoder; for a thinker request, also text tokens the talker
      has not consumed, at the configured frames per token).

    `buffer_ms(now)` is the stage-aware playback buffer P: how long the user can
    keep listening without any further work from this stage.
    """

    started: bool
    drained_at: float
    queued_ms: float = 0.0

    def buffer_ms(self, now: float) -> float:
        return max(0.0, self.drained_at - now) * 1000.0 + self.queued_ms


class InteractionView(ABC):
    """Per-request playback telemetry for one stage's scheduler.

    Contract: `playback(request_id)` is called on the engine thread, many times per
    scheduling round, so it must be a cheap, non-blocking lookup (no I/O, no locks
    held across the event loop); it returns None when the request has no telemetry
    (unknown request, or the publisher has nothing for it yet), and the scheduler
    then falls back to age order for that request.
    """

    @abstractmethod
    def playback(self, request_id: str) -> PlaybackState | None:
        """The request's playback state now, or None if unknown."""

    def next_use(self, request_id: str) -> float | None:
        """Predicted clock time at which a dormant request (a session's context between
        turns) gets work again, or None if unknown. The same cheapness contract holds."""
        return None
