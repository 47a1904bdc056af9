"""The stages' view of the conversation: per-request playback state, published by turns."""

from __future__ import annotations

from stages.interaction import InteractionView, PlaybackState

NOT_STARTED = PlaybackState(started=False, drained_at=0.0)


class PlaybackBoard(InteractionView):
    """Request id -> PlaybackState, written on the event loop, read by engine threads.

    Writes replace whole immutable states and reads are single dict lookups, so no
    lock is needed: a reader sees the state before or after a write, never a mix.
    """

    def __init__(self) -> None:
        self._states: dict[str, PlaybackState] = {}

    def playback(self, request_id: str) -> PlaybackState | None:
        return self._states.get(request_id)

    def publish(self, request_id: str, state: PlaybackState) -> None:
        self._states[request_id] = state

    def withdraw(self, request_id: str) -> None:
        self._states.pop(request_id, None)


def reply_states(started: bool, drained_at: float, frame_ms: float, frames_per_token: int,
                 spoken_tokens: int, codec_frames: int, vocoded_frames: int) -> tuple[PlaybackState, ...]:
    """(thinker, talker, vocoder) states of one reply whose delivered audio runs out at `drained_at`.

    The vocoder's buffer P is the delivered, unplayed audio; the talker's adds the
    frames it produced that the vocoder has not turned into audio yet; the thinker's
    adds the spoken tokens the talker has not voiced yet, at `frames_per_token`.
    """
    talker_queue_ms = max(0, codec_frames - vocoded_frames) * frame_ms
    thinker_queue_ms = max(0, spoken_tokens * frames_per_token - vocoded_frames) * frame_ms
    return (PlaybackState(started, drained_at, thinker_queue_ms), PlaybackState(started, drained_at, talker_queue_ms),
            PlaybackState(started, drained_at, 0.0))
