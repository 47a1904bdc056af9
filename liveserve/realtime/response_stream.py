"""One response as Realtime server events, in protocol order: what the controller reports, translated."""

from __future__ import annotations

from collections.abc import Callable

from liveserve.realtime.conversation import FunctionCall, Item
from liveserve.realtime.input_audio import encode_pcm16
from liveserve.realtime.metrics import ServerMetrics
from liveserve.realtime.naming import Dialect, message_item, new_id
from liveserve.realtime.settings import SessionSettings
from orchestrator.session.events import AudioDelta, TextDelta, TurnDone, TurnUsage, UnheardWork
from orchestrator.session.tools import ToolCall

Emit = Callable[..., None]


class ResponseStream:
    """Emits response.created, the item and content part, audio/transcript (or text) deltas, the done
    events and finally response.done with usage, for one assistant `item`; or, for a reply that is a function
    call, its function_call item with its arguments. Where the model may call a tool (the settings' tools),
    the message item is announced with the first delta (the reply is then not a call), else at once.

    `open(previous_item_id)` announces it; `forward` sends a delta; `close(done, cancel_reason)` ends
    it, counting the turn's work (and `on_unheard(item, unheard)` the work a cut left unheard). Times
    are `clock`'s (the orchestrator's).

    Not folded into the reply's other objects: in the Realtime API a response is not its item (its own
    id, status and settings, echoed in response.created and response.done, and an output list of
    items), and it ends at response.done while its Item stays in the conversation; the reply's Turn
    is the orchestrator's generation, which the protocol layer does not see.
    """

    def __init__(self, item: Item, settings: SessionSettings, turn_end: float, emit: Emit, dialect: Dialect,
                 metrics: ServerMetrics, on_unheard: Callable[[Item, UnheardWork], dict],
                 clock: Callable[[], float]) -> None:
        self.item, self.settings, self.turn_end = item, settings, turn_end
        self.emit, self.dialect, self.metrics, self.on_unheard, self.clock = emit, dialect, metrics, on_unheard, clock
        self.response_id = new_id("resp")
        self.speak = "audio" in settings.output_modalities
        self.first_audio_at: float | None = None
        self.previous_item_id: str | None = None
        self.announced = False  # the message item: announced at once, or once the reply is known not a call

    def _ids(self) -> dict:
        return {"response_id": self.response_id, "item_id": self.item.item_id, "output_index": 0, "content_index": 0}

    def open(self, previous_item_id: str | None) -> None:
        self.previous_item_id = previous_item_id
        self.emit("response.created", response=self.response_json("in_progress"))
        if not self.settings.tools.may_call:
            self._announce_message()

    def _announce_message(self) -> None:
        self.announced = True
        self._announce(message_item(self.item.item_id, "assistant", [], "in_progress"))
        self.emit("response.content_part.added", **self._ids(), part=self._part("audio" if self.speak else "text"))

    def _announce(self, item_json: dict) -> None:
        self.emit("response.output_item.added", response_id=self.response_id, output_index=0, item=item_json)
        self.emit("conversation.item.added", previous_item_id=self.previous_item_id, item=item_json)

    def forward(self, event: TextDelta | AudioDelta) -> None:
        if not self.announced:
            self._announce_message()
        if isinstance(event, TextDelta):
            self.item.transcript += event.text
            name = "response.output_audio_transcript.delta" if self.speak else "response.output_text.delta"
            self.emit(name, **self._ids(), delta=event.text)
            return
        if self.first_audio_at is None:
            self.first_audio_at = self.clock()
            self.metrics.observe_ttfp(self.first_audio_at - self.turn_end)
        self.item.audio_ms += event.duration_ms
        self.emit("response.output_audio.delta", **self._ids(), delta=encode_pcm16(event.pcm))

    def close(self, done: TurnDone, cancel_reason: str | None) -> str:
        """Emit the done events; the response's final status."""
        status = "cancelled" if cancel_reason else done.status
        self.metrics.count_generated(done.usage)
        if done.usage.unheard is not None:
            self.on_unheard(self.item, done.usage.unheard)
        self.item.status = "completed" if status == "completed" else "incomplete"
        if done.tool_call is not None and not self.announced:
            self._close_call(done.tool_call)
        else:
            self._close_message()
        self.emit("response.done", response=self.response_json(status, done, cancel_reason))
        return status

    def _close_call(self, call: ToolCall) -> None:
        """The reply is a function call: its item, its arguments (in one delta) and their end."""
        item = self.item
        item.call = FunctionCall(new_id("call"), call.name)
        self._announce(item.call.item_json(item.item_id, "in_progress"))
        item.call.arguments = call.arguments
        ids = {"response_id": self.response_id, "item_id": item.item_id, "output_index": 0,
               "call_id": item.call.call_id}
        self.emit("response.function_call_arguments.delta", **ids, delta=call.arguments)
        self.emit("response.function_call_arguments.done", **ids, name=call.name, arguments=call.arguments)
        self._item_done()

    def _close_message(self) -> None:
        if not self.announced:
            self._announce_message()
        emit = self.emit
        if self.speak:
            emit("response.output_audio.done", **self._ids())
            emit("response.output_audio_transcript.done", **self._ids(), transcript=self.item.transcript)
            if self.first_audio_at is not None and self.item.audio_ms:
                self.metrics.observe_rtf((self.clock() - self.turn_end) / (self.item.audio_ms / 1000))
        else:
            emit("response.output_text.done", **self._ids(), text=self.item.transcript)
        self.item.content = [self._content()]
        emit("response.content_part.done", **self._ids(), part=self._part("audio" if self.speak else "text"))
        self._item_done()

    def _item_done(self) -> None:
        item_json = self.item.json()
        self.emit("response.output_item.done", response_id=self.response_id, output_index=0, item=item_json)
        self.emit("conversation.item.done", item=item_json)

    def _part(self, kind: str) -> dict:
        """The reply's content as `kind` names it: "audio"/"text" in content-part events, the dialect's
        content type ("output_audio"/"output_text" in GA) in items."""
        return {"type": kind, "transcript" if self.speak else "text": self.item.transcript}

    def _content(self) -> dict:
        return self._part(self.dialect.content_type("output_audio" if self.speak else "output_text"))

    def response_json(self, status: str, done: TurnDone | None = None, cancel_reason: str | None = None) -> dict:
        details = None
        if status == "cancelled":
            details = {"type": "cancelled", "reason": cancel_reason or "client_cancelled"}
        elif status == "incomplete":
            details = {"type": "incomplete", "reason": "max_output_tokens"}
        elif status == "failed":
            details = {"type": "failed", "error": {"type": "server_error", "message": done.error if done else ""}}
        return {
            "object": "realtime.response", "id": self.response_id, "status": status, "status_details": details,
            "output": [self.item.json()] if done else [], "output_modalities": list(self.settings.output_modalities),
            "max_output_tokens": self.settings.max_output_tokens or "inf", "metadata": self.settings.metadata,
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
