"""What the interaction controller reports, as Realtime server events (translation only)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from liveserve.realtime.conversation import Conversation, Item
from liveserve.realtime.errors import RealtimeError
from liveserve.realtime.input_transcription import InputTranscription
from liveserve.realtime.response_stream import ResponseStream
from liveserve.realtime.response_trace import ResponseTrace
from orchestrator.interaction.events import (
    AudioCommitted,
    InteractionEvent,
    ItemTruncated,
    Refused,
    ResponseEnded,
    ResponseStarted,
    SpeechBegan,
    SpeechEnded,
    UserItemReady,
    UserItemRejected,
    UserTranscript,
)
from orchestrator.session.events import AudioDelta, TextDelta, UnheardWork


class RealtimeSession(Protocol):
    """What translating needs of a connection (a liveserve.realtime.session.RealtimeSession)."""

    session_id: str
    conversation: Conversation
    response: ResponseStream | None
    response_trace: ResponseTrace | None
    input_transcription: InputTranscription

    def emit(self, ga_name: str, **fields) -> None: ...

    def emit_error(self, error: RealtimeError, event_id: str | None = None) -> None: ...

    def add_user_item(self, item_id: str, content: list[dict]) -> None: ...

    def open_response(self, item_id: str, turn_end: float) -> None: ...

    def report_unheard(self, item: Item, unheard: UnheardWork) -> dict: ...


USER_AUDIO = [{"type": "input_audio", "transcript": None}]


def translate(session: RealtimeSession, event: InteractionEvent) -> None:
    TRANSLATIONS[type(event)](session, event)


def _speech_began(session: RealtimeSession, event: SpeechBegan) -> None:
    session.emit("input_audio_buffer.speech_started", audio_start_ms=event.audio_start_ms, item_id=event.item_id)


def _speech_ended(session: RealtimeSession, event: SpeechEnded) -> None:
    session.emit("input_audio_buffer.speech_stopped", audio_end_ms=event.audio_end_ms, item_id=event.item_id)


def _audio_committed(session: RealtimeSession, event: AudioCommitted) -> None:
    items = session.conversation.items
    session.emit("input_audio_buffer.committed", previous_item_id=items[-1].item_id if items else None,
                 item_id=event.item_id)
    session.add_user_item(event.item_id, USER_AUDIO)


def _user_transcript(session: RealtimeSession, event: UserTranscript) -> None:
    session.input_transcription.report(event)


def _user_item_ready(session: RealtimeSession, event: UserItemReady) -> None:
    item = session.conversation.get(event.item_id)
    if item is not None:
        session.emit("conversation.item.done", item=item.json())


def _user_item_rejected(session: RealtimeSession, event: UserItemRejected) -> None:
    session.conversation.remove(event.item_id)
    session.emit_error(RealtimeError("item_rejected", event.message, "item"))


def _response_started(session: RealtimeSession, event: ResponseStarted) -> None:
    session.open_response(event.item_id, event.turn_end)


def _delta(session: RealtimeSession, event: TextDelta | AudioDelta) -> None:
    session.response.forward(event)


def _response_ended(session: RealtimeSession, event: ResponseEnded) -> None:
    stream, session.response = session.response, None
    status = stream.close(event.done, event.cancel_reason)
    if session.response_trace is not None:
        session.response_trace.record(
            session=session.session_id, requests=event.request_ids, status=status,
            turn_end=stream.turn_end, first_audio=stream.first_audio_at, done=event.ended_at,
            text_tokens=event.done.usage.text_tokens, codec_frames=event.done.usage.codec_frames,
            audio_ms=stream.item.audio_ms, tracing=session.settings.tracing)


def _item_truncated(session: RealtimeSession, event: ItemTruncated) -> None:
    item = session.conversation.get(event.item_id)
    extension = {}
    if item is not None:  # as in OpenAI's API, a cut item keeps no transcript of words that were not heard
        item.content = [{**part, "transcript": ""} if "transcript" in part else part for part in item.content]
    if event.unheard is not None and item is not None:
        extension["liveserve"] = session.report_unheard(item, event.unheard)
    session.emit("conversation.item.truncated", item_id=event.item_id, content_index=0,
                 audio_end_ms=event.audio_end_ms, **extension)


def _refused(session: RealtimeSession, event: Refused) -> None:
    session.emit_error(RealtimeError(event.code, event.message))


TRANSLATIONS: dict[type, Callable] = {
    SpeechBegan: _speech_began, SpeechEnded: _speech_ended, AudioCommitted: _audio_committed,
    UserTranscript: _user_transcript, UserItemReady: _user_item_ready, UserItemRejected: _user_item_rejected,
    ResponseStarted: _response_started,
    TextDelta: _delta, AudioDelta: _delta, ResponseEnded: _response_ended, ItemTruncated: _item_truncated,
    Refused: _refused,
}
