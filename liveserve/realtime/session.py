"""One Realtime connection: client events checked and handed to the session's InteractionController,
what it reports translated into server events. Nothing here decides anything about the interaction.

Over 300 lines because it holds one short handler per client event of the protocol, in one table."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace

from starlette.websockets import WebSocketDisconnect

from liveserve.realtime.conversation import Conversation, FunctionCall, Item
from liveserve.realtime.duplex_link import DuplexLink, duplex_request
from liveserve.realtime.errors import (
    RealtimeError,
    event_id_of,
    lone_surrogate_at,
    refusal,
    require,
    shown,
)
from liveserve.realtime.ignored_settings import ignored_error, ignored_settings
from liveserve.realtime.input_audio import (
    Resampler24to16,
    decode_pcm16,
    num_pcm16_samples,
)
from liveserve.realtime.input_transcription import InputTranscription
from liveserve.realtime.interaction_events import translate
from liveserve.realtime.items import (
    FunctionOutput,
    parse_function_output,
    parse_user_item,
)
from liveserve.realtime.metrics import ServerMetrics
from liveserve.realtime.naming import Dialect, message_item, new_id
from liveserve.realtime.response_stream import ResponseStream, unheard_json
from liveserve.realtime.response_trace import ResponseTrace
from liveserve.realtime.settings import (
    SessionSettings,
    apply_update,
    beta_session,
    ga_session,
    response_overrides,
    turn_request,
    turn_taking,
)
from liveserve.realtime.tool_settings import tools_json
from orchestrator.interaction.events import InteractionEvent
from orchestrator.orchestrator import Orchestrator
from orchestrator.session.events import UnheardWork
from orchestrator.session.tools import tool_response

MIN_COMMIT_MS = 100.0
INLINE_DECODE_SAMPLES = 24_000  # audio up to this (1 s) is decoded on the event loop
CHARS_PER_TOKEN_BOUND = 16  # text longer than this many characters per context position cannot fit
log = logging.getLogger(__name__)


class RealtimeSession:
    """Owns a connection's settings, its conversation as the client sees it, its responses' event
    streams and its interaction controller.

    `handle` takes one raw client message; a mistake in it becomes an `error` event and the session
    goes on (a fault of the server's own becomes a `server_error` event, logged with its traceback).
    Outgoing events are queued, serialized as ASCII JSON (any string survives: lone surrogates are
    escaped) and written in order by the writer through `send` (text frames). `close` is the one
    teardown path. In full-duplex mode (`session.liveserve.duplex`) input audio streams frame by
    frame into a DuplexLink; turning it on asks `admit_stream` (None: admitted, else the cap of
    streams that refused it). `ended` is set when the connection should close: the duplex stream
    failed, or the writer could not write (then `end_code` is 1011 and the reason is logged).
    """

    def __init__(self, orch: Orchestrator, settings: SessionSettings, dialect: Dialect,
                 send: Callable[[str], Awaitable[None]], metrics: ServerMetrics,
                 on_frame_latency: Callable[[float], None] | None = None,
                 response_trace: ResponseTrace | None = None,
                 admit_stream: Callable[[], int | None] = lambda: None) -> None:
        self.session_id = new_id("sess")
        self.orch, self.settings, self.dialect, self.metrics = orch, settings, dialect, metrics
        self.response_trace, self.admit_stream = response_trace, admit_stream
        self.conversation = Conversation()
        self.input_transcription = InputTranscription(self.emit, self.conversation)
        self.resampler = Resampler24to16()
        self.response: ResponseStream | None = None
        self.duplex: DuplexLink | None = None
        self._response_settings = settings  # of the next response the controller starts
        self._on_frame_latency = on_frame_latency or (lambda seconds: None)
        self.ended = asyncio.Event()
        self.end_code = 1000
        self._outbox: asyncio.Queue[dict | None] = asyncio.Queue()
        self._writer = asyncio.ensure_future(self._write(send))
        self.max_text_chars = CHARS_PER_TOKEN_BOUND * orch.geometry.max_position
        self.controller = orch.open_interaction(self.session_id, self._on_interaction, settings.instructions)
        self._configure()
        self.emit("session.created", session=self._session_json())

    def _configure(self) -> None:
        settings = self.settings
        self.input_transcription.enabled = settings.transcription is not None
        self.controller.configure(turn_taking(settings), turn_request(settings), self.input_transcription.enabled)

    def _session_json(self) -> dict:
        view = beta_session if self.dialect.is_beta else ga_session
        return view(self.session_id, self.settings)

    def emit(self, ga_name: str, **fields) -> None:
        name = self.dialect.name(ga_name)
        if name is not None:
            self._outbox.put_nowait({"type": name, "event_id": new_id("event"), **fields})

    def emit_error(self, error: RealtimeError, event_id: str | None = None) -> None:
        self.emit("error", error=error.payload(event_id))

    async def _write(self, send: Callable[[str], Awaitable[None]]) -> None:
        try:
            while (event := await self._outbox.get()) is not None:
                await send(json.dumps(event))
        except (OSError, RuntimeError, WebSocketDisconnect):  # the client is gone: the receive loop sees it too
            self.ended.set()
        except Exception:  # noqa: BLE001 - a fault of ours: end the session visibly
            log.exception("session %s: its writer failed; closing it", self.session_id)
            self.end_code = 1011
            self.ended.set()

    async def handle(self, raw: str | bytes) -> None:
        event_id = None
        try:
            event = self._parse(raw)
            event_id = event_id_of(event)
            handler = HANDLERS.get(event["type"])
            require(handler is not None, "unknown_event", f"unknown event type {shown(event['type'])}", "type")
            result = handler(self, event)
            if asyncio.iscoroutine(result):
                await result
        except RealtimeError as error:
            self.emit_error(error, event_id)
        except Exception as exc:  # noqa: BLE001 - a fault of ours must not end the session silently
            log.exception("session %s: an event failed", self.session_id)
            self.emit_error(RealtimeError("server_error", f"the server failed on this event: {type(exc).__name__}",
                                          error_type="server_error"), event_id)

    @staticmethod
    def _parse(raw: str | bytes) -> dict:
        require(isinstance(raw, str), "invalid_message", "messages must be JSON text frames")
        try:
            event = json.loads(raw)
        except ValueError as exc:
            raise RealtimeError("invalid_json", f"message is not valid JSON: {exc}") from None
        except RecursionError:
            raise RealtimeError("invalid_json", "message is nested too deeply") from None
        # a lone surrogate can come only from a \u escape; one character is found ~50x faster than two
        if "\\" in raw and "\\u" in raw and (path := lone_surrogate_at(event)) is not None:
            raise RealtimeError("invalid_value", f"{path}: text must be valid Unicode (it holds a lone surrogate)", path)
        require(isinstance(event, dict), "invalid_json", "a client event must be a JSON object")
        require(isinstance(event.get("type"), str), "missing_required_parameter", "event has no 'type'", "type")
        return event

    # session and input audio

    def on_session_update(self, event: dict) -> None:
        duplex = duplex_request(event.get("session"))
        require(not duplex or self.duplex is not None or self.response is None, "conversation_already_has_active_response",
                "a response is in progress; duplex mode starts after it", "session.liveserve.duplex")
        if duplex:
            with refusal("invalid_value", "session.liveserve.duplex"):
                self.orch.geometry.hearing.check_duplex()
        settings = apply_update(self.settings, event.get("session"))
        if not self.orch.geometry.hearing.transcribes:
            settings = replace(settings, transcription=None)
        self._require_voice(settings, "session.output_modalities")
        if duplex and self.duplex is None and (cap := self.admit_stream()) is not None:
            raise RealtimeError("session_capacity_exceeded", f"the server is at its limit of {cap} duplex streams; "
                                "try again later", "session.liveserve.duplex", error_type="server_error")
        if (self.duplex is not None) if duplex is None else duplex:  # duplex after this update: no turns to detect
            settings = replace(settings, turn_detection=None)
        if settings.instructions != self.settings.instructions:
            require(len(settings.instructions) <= self.max_text_chars, "invalid_value", "instructions are longer "
                    f"than the model's context could hold ({len(settings.instructions)} characters)",
                    "session.instructions")
        new_tools = tools_json(settings.tools) != tools_json(self.settings.tools)
        if settings.instructions != self.settings.instructions or new_tools:
            with refusal("conversation_busy", "session.tools" if new_tools else "session.instructions"):
                self.controller.set_instructions(settings.instructions, settings.tools)
        self.settings = self._response_settings = settings
        self._configure()
        if duplex is not None:
            self._set_duplex(duplex)
        self.emit("session.updated", session=self._session_json())
        if ignored := ignored_settings(event["session"], self.orch.geometry.hearing.transcribes):
            self.emit_error(ignored_error(ignored), event_id_of(event))

    def _set_duplex(self, on: bool) -> None:
        if on and self.duplex is None:
            self.duplex = DuplexLink(self.controller, self.emit, self.emit_error, self._on_frame_latency,
                                     on_failed=self.ended.set)
        elif not on and self.duplex is not None:
            self.duplex.close()
            self.duplex = None

    async def on_append(self, event: dict) -> None:
        audio = event.get("audio")
        num_samples = num_pcm16_samples(audio)
        buffer = self.controller.buffer
        require(self.duplex is not None or buffer.room(num_samples * 2 // 3 + 1), "input_audio_buffer_full",
                f"the input audio buffer holds at most {buffer.max_samples // 16000} s; commit or clear it", "audio")
        big = num_samples > INLINE_DECODE_SAMPLES  # decoded on a worker thread
        samples = await asyncio.to_thread(decode_pcm16, audio) if big else decode_pcm16(audio)
        if self.duplex is not None:
            self.duplex.push(samples)
            return
        pcm16k = await asyncio.to_thread(self.resampler.process, samples) if big else self.resampler.process(samples)
        with refusal("invalid_value", "item_id"):  # speech over a reply may cut an item the client edited
            await self.controller.feed_audio(pcm16k)

    def on_commit(self, event: dict) -> None:
        require(self.controller.buffer.num_samples >= MIN_COMMIT_MS * 16, "input_audio_buffer_commit_empty",
                f"buffer too small: at least {MIN_COMMIT_MS:.0f} ms of audio is needed to commit")
        self.controller.commit_audio()

    def on_clear(self, event: dict) -> None:
        self.controller.clear_audio()
        self.emit("input_audio_buffer.cleared")

    # conversation items

    async def on_item_create(self, event: dict) -> None:
        raw = event.get("item")
        if isinstance(raw, dict) and raw.get("type") == "function_call_output":
            self._add_function_output(parse_function_output(raw, self.max_text_chars))
            return
        item = parse_user_item(raw, self.max_text_chars)
        require(self.conversation.get(item.item_id) is None, "duplicate_item_id",
                f"item {shown(item.item_id)} already exists", "item.id")
        big = item.num_samples > INLINE_DECODE_SAMPLES  # decoded and resampled on a worker thread
        audio_16k = await asyncio.to_thread(item.audio_16k) if big else item.audio_16k()
        self.add_user_item(item.item_id, item.content)
        self.controller.add_user_item(item.item_id, audio_16k, item.text)

    def add_user_item(self, item_id: str, content: list[dict]) -> None:
        """The client's view of a new user item (the controller is told separately)."""
        previous = self.conversation.add(Item(item_id, "user", content))
        self.emit("conversation.item.added", previous_item_id=previous, item=message_item(item_id, "user", content))

    def _add_function_output(self, result: FunctionOutput) -> None:
        """A call's result joins the conversation, and the model's context as a user message."""
        require(self.conversation.get(result.item_id) is None, "duplicate_item_id",
                f"item {shown(result.item_id)} already exists", "item.id")
        require(self.conversation.function_call(result.call_id) is not None, "invalid_value",
                f"no function call in this conversation has call_id {shown(result.call_id)}", "item.call_id")
        item = Item(result.item_id, "tool", [], call=FunctionCall(result.call_id, output=result.output))
        self.emit("conversation.item.added", previous_item_id=self.conversation.add(item), item=item.json())
        self.controller.add_user_item(item.item_id, None, tool_response(result.output))

    def on_item_truncate(self, event: dict) -> None:
        item_id, end_ms = event.get("item_id"), event.get("audio_end_ms")
        item = self.conversation.get(item_id) if isinstance(item_id, str) else None
        require(item is not None, "item_not_found", f"no item {shown(item_id)}", "item_id")
        require(item.role == "assistant", "invalid_value", "only assistant audio can be truncated", "item_id")
        require(event.get("content_index", 0) == 0, "invalid_value", "content_index must be 0", "content_index")
        ok = isinstance(end_ms, (int, float)) and not isinstance(end_ms, bool) and 0 <= end_ms <= item.audio_ms + 1e-6
        require(ok, "invalid_value", f"audio_end_ms must be within the item's {item.audio_ms:.0f} ms of audio", "audio_end_ms")
        with refusal("invalid_value", "item_id"):
            self.controller.truncate_item(item_id, end_ms)

    def on_item_retrieve(self, event: dict) -> None:
        item_id = event.get("item_id")
        item = self.conversation.get(item_id) if isinstance(item_id, str) else None
        require(item is not None, "item_not_found", f"no item {shown(item_id)}", "item_id")
        self.emit("conversation.item.retrieved", item=item.json())

    def report_unheard(self, item: Item, unheard: UnheardWork) -> dict:
        """Count `unheard` as the item's latest figure (see ServerMetrics.count_unheard); return its `liveserve` JSON."""
        item.unheard_counted = self.metrics.count_unheard(item.unheard_counted, unheard)
        return unheard_json(unheard)

    def on_item_delete(self, event: dict) -> None:
        item_id = event.get("item_id")
        item = self.conversation.get(item_id) if isinstance(item_id, str) else None
        require(item is not None, "item_not_found", f"no item {shown(item_id)}", "item_id")
        require(self.response is None or self.response.item is not item, "invalid_value",
                "the item of the response in progress cannot be deleted", "item_id")
        with refusal("conversation_busy", "item_id"):
            self.controller.delete_item(item_id)
        self.conversation.remove(item_id)
        self.emit("conversation.item.deleted", item_id=item_id)

    # responses

    def on_response_create(self, event: dict) -> None:
        require(self.duplex is None, "invalid_request", "a duplex session answers every frame; responses are not "
                "created in duplex mode (turn it off with session.liveserve.duplex false)", "type")
        require(self.response is None, "conversation_already_has_active_response",
                "a response is already in progress; cancel it or wait for response.done")
        body = event.get("response")
        settings = response_overrides(body, self.settings)
        self._require_voice(settings, "response.output_modalities")
        extension = (body or {}).get("liveserve") or {}
        require(isinstance(extension, dict), "invalid_type", "liveserve must be an object", "response.liveserve")
        ignore_eos = extension.get("ignore_eos", False)
        require(isinstance(ignore_eos, bool), "invalid_type", "ignore_eos must be a boolean", "response.liveserve.ignore_eos")
        if settings.tools.forced and self._answers_a_call():
            settings = replace(settings, tools=replace(settings.tools, choice="auto"))
        self._response_settings = settings
        self.controller.start_response(turn_request(settings, ignore_eos), self.orch.clock())

    def _answers_a_call(self) -> bool:
        """The conversation ends with a call's output: the reply to it is the model's choice, so that a
        required tool is called once a user turn, not in a loop (the Agents SDK's reset_tool_choice)."""
        items = self.conversation.items
        return bool(items) and items[-1].call is not None and items[-1].call.output is not None

    def _require_voice(self, settings: SessionSettings, param: str) -> None:
        require("audio" not in settings.output_modalities or self.orch.geometry.graph.speaks, "invalid_value",
                "this model only writes: its pipeline has no stage that makes audio", param)

    def on_response_cancel(self, event: dict) -> None:
        require(self.response is not None, "response_cancel_not_active", "there is no response in progress to cancel")
        self.controller.cancel_response()

    def on_playback_ack(self, event: dict) -> None:
        played = event.get("played_ms")
        ok = isinstance(played, (int, float)) and not isinstance(played, bool) and 0 <= played < math.inf
        require(ok, "invalid_value", f"played_ms must be a non-negative number, got {shown(played)}", "played_ms")
        item_id = event.get("item_id")
        require(item_id is None or isinstance(item_id, str), "invalid_type", "item_id must be a string", "item_id")
        self.controller.ack_playback(float(played), item_id)

    # what the controller reports

    def _on_interaction(self, event: InteractionEvent) -> None:
        translate(self, event)

    def open_response(self, item_id: str, turn_end: float) -> None:
        """A reply started (ResponseStarted): announce its item under the settings it was asked with."""
        item = Item(item_id, "assistant", [], status="in_progress")
        self.response = ResponseStream(item, self._response_settings, turn_end, self.emit, self.dialect,
                                       self.metrics, self.report_unheard, self.orch.clock)
        self._response_settings = self.settings
        self.response.open(self.conversation.add(item))

    # lifetime

    async def close(self) -> None:
        """The one teardown path: cancel the response, free the session in every stage."""
        await self.controller.close()
        self._outbox.put_nowait(None)
        await asyncio.gather(self._writer, return_exceptions=True)


HANDLERS: dict[str, Callable[[RealtimeSession, dict], object]] = {
    "session.update": RealtimeSession.on_session_update,
    "input_audio_buffer.append": RealtimeSession.on_append,
    "input_audio_buffer.commit": RealtimeSession.on_commit,
    "input_audio_buffer.clear": RealtimeSession.on_clear,
    "conversation.item.create": RealtimeSession.on_item_create,
    "conversation.item.truncate": RealtimeSession.on_item_truncate,
    "conversation.item.delete": RealtimeSession.on_item_delete,
    "conversation.item.retrieve": RealtimeSession.on_item_retrieve,
    "response.create": RealtimeSession.on_response_create,
    "response.cancel": RealtimeSession.on_response_cancel,
    "playback.ack": RealtimeSession.on_playback_ack,
}
