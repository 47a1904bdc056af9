"""One response: turn events in, Realtime server events out, in protocol order."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from liveserve.realtime.conversation import Item
from liveserve.realtime.input_audio import encode_pcm16
from liveserve.realtime.naming import message_item, new_id
from liveserve.realtime.settings import SessionSettings
from orchestrator.events import AudioDelta, TextDelta, TurnDone, TurnUsage, UnheardWork

if TYPE_CHECKING:
    from liveserve.realtime.session import RealtimeSession
    from orchestrator.turn import Turn


class ResponseStream:
    """Streams one Turn to the client and keeps the assistant item and playback in step.

    Emits response.created, the item and content part, audio/transcript (or text)
    deltas, the done events and finally response.done with usage. After `cancel`
    no more deltas go out; the turn's TurnDone still closes the response. Closing
    counts the turn's work, and its unheard work if a cancel cut it.
    """

    def __init__(self, session: RealtimeSession, settings: SessionSettings, turn_end: float) -> None:
        self.session = session
        self.settings = settings
        self.response_id = new_id("resp")
        self.item = Item(new_id("item"), "assistant", [], status="in_progress")
        self.speak = "audio" in settings.output_modalities
        self.turn_end = turn_end
        self.first_audio_at: float | None = None
        self.cancel_reason: str | None = None
        self.turn: Turn | None = None

    @property
    def part_type(self) -> str:
        return self.session.dialect.content_type("output_audio" if self.speak else "output_text")

    def _ids(self) -> dict:
        return {"response_id": self.response_id, "item_id": self.item.item_id, "output_index": 0, "content_index": 0}

    def open(self) -> None:
        emit = self.session.emit
        emit("response.created", response=self.response_json("in_progress"))
        item_json = message_item(self.item.item_id, "assistant", [], "in_progress")
        emit("response.output_item.added", response_id=self.response_id, output_index=0, item=item_json)
        previous = self.session.conversation.add(self.item)
        emit("conversation.item.added", previous_item_id=previous, item=item_json)
        emit("response.content_part.added", **self._ids(), part=self._part())
        if self.speak:
            self.session.monitor.playback.start_item(self.item.item_id)

    async def pump(self, turn: Turn) -> None:
        self.turn = turn
        while True:
            event = await turn.events.get()
            if isinstance(event, TurnDone):
                self._close(event)
                return
            if self.cancel_reason is None:
                self._forward(event)

    def _forward(self, event: TextDelta | AudioDelta) -> None:
        emit = self.session.emit
        if isinstance(event, TextDelta):
            self.item.transcript += event.text
            name = "response.output_audio_transcript.delta" if self.speak else "response.output_text.delta"
            emit(name, **self._ids(), delta=event.text)
            return
        if self.first_audio_at is None:
            self.first_audio_at = time.monotonic()
            self.session.metrics.observe_ttfp(self.first_audio_at - self.turn_end)
        self.item.audio_ms += event.duration_ms
        self.session.monitor.playback.delivered(event.duration_ms)
        self.session.report_playback()
        emit("response.output_audio.delta", **self._ids(), delta=encode_pcm16(event.pcm))

    def _close(self, done: TurnDone) -> None:
        emit, playback = self.session.emit, self.session.monitor.playback
        status = "cancelled" if self.cancel_reason else done.status
        self.session.metrics.count_generated(done.usage)
        if done.usage.unheard is not None:
            self.session.report_unheard(self.item, done.usage.unheard)
        self.item.status = "completed" if status == "completed" else "incomplete"
        if self.speak:
            playback.finish_generation()
            emit("response.output_audio.done", **self._ids())
            emit("response.output_audio_transcript.done", **self._ids(), transcript=self.item.transcript)
            if self.first_audio_at is not None and self.item.audio_ms:
                self.session.metrics.observe_rtf((time.monotonic() - self.turn_end) / (self.item.audio_ms / 1000))
        else:
            emit("response.output_text.done", **self._ids(), text=self.item.transcript)
        self.item.content = [self._part()]
        emit("response.content_part.done", **self._ids(), part=self._part())
        item_json = self.item_json()
        emit("response.output_item.done", response_id=self.response_id, output_index=0, item=item_json)
        emit("conversation.item.done", item=item_json)
        emit("response.done", response=self.response_json(status, done))
        if self.session.response_trace is not None:
            self._trace(status, done)

    def _trace(self, status: str, done: TurnDone) -> None:
        turn = self.turn
        self.session.response_trace.record(
            session=self.session.session_id, thinker=turn.session.thinker_id, turn=turn.turn_id, status=status,
            turn_end=self.turn_end, first_audio=self.first_audio_at, done=time.monotonic(),
            text_tokens=done.usage.text_tokens, codec_frames=done.usage.codec_frames, audio_ms=self.item.audio_ms)

    def _part(self) -> dict:
        if self.speak:
            return {"type": self.part_type, "transcript": self.item.transcript}
        return {"type": self.part_type, "text": self.item.transcript}

    def item_json(self) -> dict:
        return message_item(self.item.item_id, "assistant", [self._part()], self.item.status)

    def response_json(self, status: str, done: TurnDone | None = None) -> dict:
        details = None
        if status == "cancelled":
            details = {"type": "cancelled", "reason": self.cancel_reason or "client_cancelled"}
        elif status == "incomplete":
            details = {"type": "incomplete", "reason": "max_output_tokens"}
        elif status == "failed":
            details = {"type": "failed", "error": {"type": "server_error", "message": done.error if done else ""}}
        return {
            "object": "realtime.response", "id": self.response_id, "status": status, "status_details": details,
            "output": [self.item_json()] if done else [], "output_modalities": list(self.settings.output_modalities),
            "max_output_tokens": self.settings.max_output_tokens or "inf", "metadata": None,
            "usage": None if done is None else usage_json(done.usage),
        }


def usage_json(usage: TurnUsage) -> dict:
    """OpenAI-shaped usage; a cut response adds the `liveserve` unheard-work object."""
    output = usage.text_tokens + usage.codec_frames
    body = {
        "total_tokens": usage.input_tokens + output, "input_tokens": usage.input_tokens, "output_tokens": output,
        "input_token_details": {"text_tokens": usage.input_tokens, "audio_tokens": 0, "cached_tokens": 0},
        "output_token_details": {"text_tokens": usage.text_tokens, "audio_tokens": usage.codec_frames},
    }
    if usage.unheard is not None:
        body["liveserve"] = unheard_json(usage.unheard)
    return body


def unheard_json(unheard: UnheardWork) -> dict:
    """The LiveServe extension object: work generated beyond what was heard (audio tokens are codec frames)."""
    return {"heard_ms": unheard.heard_ms, "unheard_text_tokens": unheard.text_tokens,
            "unheard_audio_tokens": unheard.codec_frames, "unheard_vocoder_frames": unheard.vocoder_frames}

