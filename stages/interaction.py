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
    - `delivered_ms`: the reply's audio the user had been sent when the state was
      published, which `drained_at` counts (None: not counted). A state reaches the
      stage some ms after the stage's output does, so a stage whose request produced
      audio (`audio_ms`) beyond this adds the difference, which the state does not
      show yet; a request that produced some has started (`is_started`).

    `buffer_ms(now, audio_ms)` is the stage-aware playback buffer P: how long the user
    can keep listening without any further work from this stage, whose request has
    produced `audio_ms` of the reply's audio.
    """

    started: bool
    drained_at: float
    queued_ms: float = 0.0
    delivered_ms: float | None = None

    def unpublished_ms(self, audio_ms: float) -> float:
        """What of `audio_ms`, produced at the stage, this state does not count yet."""
        return 0.0 if self.delivered_ms is None else max(0.0, audio_ms - self.delivered_ms)

    def is_started(self, audio_ms: float = 0.0) -> bool:
        return self.started or self.unpublished_ms(audio_ms) > 0.0

    def buffer_ms(self, now: float, audio_ms: float = 0.0) -> float:
        return max(0.0, self.drained_at - now) * 1000.0 + self.queued_ms + self.unpublished_ms(audio_ms)


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
