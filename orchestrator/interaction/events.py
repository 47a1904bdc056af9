"""What an InteractionController tells the protocol layer, in order; the protocol layer only translates.

A response's text and audio arrive as the turn's TextDelta and AudioDelta (orchestrator.session.events),
between its ResponseStarted and ResponseEnded.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.session.events import AudioDelta, TextDelta, TurnDone, TurnRequest, UnheardWork


@dataclass(frozen=True)
class SpeechBegan:
    """The user started speaking, `audio_start_ms` into the input stream; their message will be `item_id`."""

    audio_start_ms: int
    item_id: str


@dataclass(frozen=True)
class SpeechEnded:
    audio_end_ms: int
    item_id: str


@dataclass(frozen=True)
class AudioCommitted:
    """The buffered speech became user item `item_id` (it is being encoded into the context)."""

    item_id: str


@dataclass(frozen=True)
class UserTranscript:
    """What the ASR stage heard of user item `item_id`'s `audio_s` seconds of speech: while the user
    speaks a partial (the whole text so far: a later one may revise its words), then the final
    (`is_final`), which is the item's text in the context. Only a pipeline with an ASR stage reports these."""

    item_id: str
    text: str
    is_final: bool
    audio_s: float


@dataclass(frozen=True)
class UserItemReady:
    """User item `item_id` is in the model's context."""

    item_id: str


@dataclass(frozen=True)
class UserItemRejected:
    """User item `item_id` could not enter the context (`message` says why); it is gone."""

    item_id: str
    message: str


@dataclass(frozen=True)
class ResponseStarted:
    """A reply is being generated into assistant item `item_id`; `turn_end` is the clock time the
    user's turn ended (first-audio latency runs from there)."""

    item_id: str
    request: TurnRequest
    turn_end: float


@dataclass(frozen=True)
class ResponseEnded:
    """The reply of `item_id` ended at clock time `ended_at`; `cancel_reason` (turn_detected,
    client_cancelled, session_closed) when it was cut, and then no delta followed the cut.
    `request_ids` names its requests in the stages by kind (thinker, talker, vocoder), as in their
    step traces."""

    item_id: str
    done: TurnDone
    cancel_reason: str | None
    request_ids: dict[str, str]
    ended_at: float


@dataclass(frozen=True)
class ItemTruncated:
    """Assistant item `item_id` was cut where playback stood (`heard_ms`; `audio_end_ms` as asked), its
    context kept to what was heard; `unheard` is the work generated beyond it (None for an item no
    turn of this session generated, or one older than the replies kept: see RecentReplies)."""

    item_id: str
    audio_end_ms: int | float
    heard_ms: float
    unheard: UnheardWork | None


@dataclass(frozen=True)
class Refused:
    """Something the session's own turn taking asked for could not be done (`code`, `message`)."""

    code: str
    message: str


class ContextFull(ValueError):
    """What was asked would not fit the model's context (a request refused, not an event)."""


InteractionEvent = (Refused | SpeechBegan | SpeechEnded | AudioCommitted | UserTranscript | UserItemReady | UserItemRejected | ResponseStarted
                    | TextDelta | AudioDelta | ResponseEnded | ItemTruncated)
