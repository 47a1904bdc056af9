"""One Realtime connection: client events in, server events out, one teardown path."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

import numpy as np

from liveserve.realtime.conversation import Conversation, Item
from liveserve.realtime.duplex_link import DuplexLink, duplex_request
from liveserve.realtime.errors import RealtimeError, require
from liveserve.realtime.input_audio import InputAudioBuffer, Resampler24to16, decode_pcm16
from liveserve.realtime.metrics import ServerMetrics
from liveserve.realtime.naming import Dialect, message_item, new_id
from liveserve.realtime.response_stream import ResponseStream, unheard_json
from liveserve.realtime.response_trace import ResponseTrace
from liveserve.realtime.settings import SessionSettings, apply_update, beta_session, ga_session, response_overrides
from monitor import (
    BargeIn, SessionMonitor, SileroVAD, SpeechPaused, SpeechStarted, SpeechStopped, TurnDetectionConfig, TurnDetector,
)
from orchestrator.events import UnheardWork
from orchestrator.orchestrator import Orchestrator
from orchestrator.turn import TurnRequest

MIN_COMMIT_MS = 100.0


class RealtimeSession:
    """Owns a connection's settings, input buffer, conversation, monitor and responses.

    `handle` takes one raw client message; a mistake in it becomes an `error` event
    and the session goes on. Outgoing events are queued and written in order by the
    server's writer (`send`). `close` cancels any response and frees the session's
    state in every stage. In full-duplex mode (`session.liveserve.duplex`) input audio
    streams frame by frame into a DuplexLink; `is_ended` turns true when that stream
    failed and the connection should close.
    """

    def __init__(self, orch: Orchestrator, settings: SessionSettings, dialect: Dialect,
                 send: Callable[[dict], Awaitable[None]], metrics: ServerMetrics,
                 on_frame_latency: Callable[[float], None] | None = None,
                 response_trace: ResponseTrace | None = None) -> None:
        self.session_id = new_id("sess")
        self.orch, self.settings, self.dialect, self.metrics = orch, settings, dialect, metrics
        self.response_trace = response_trace
        self.conversation = Conversation()
        self.buffer = InputAudioBuffer()
        self.monitor = SessionMonitor(self.session_id, self._detector(settings), time.monotonic)
        self.response: ResponseStream | None = None
        self.pending_user_item: str | None = None
        self.speech_start_ms: float | None = None
        self.duplex: DuplexLink | None = None
        self._on_frame_latency = on_frame_latency or (lambda seconds: None)
        self._outbox: asyncio.Queue[dict | None] = asyncio.Queue()
        self._writer = asyncio.ensure_future(self._write(send))
        self._tasks: set[asyncio.Task] = set()
        orch.open_session(self.session_id, settings.instructions)
        self.emit("session.created", session=self._session_json())

    @staticmethod
    def _detector(settings: SessionSettings) -> TurnDetector:
        vad = settings.turn_detection
        config = TurnDetectionConfig() if vad is None else TurnDetectionConfig(
            vad.threshold, vad.prefix_padding_ms, vad.silence_duration_ms)
        return TurnDetector(SileroVAD(), config)

    def _session_json(self) -> dict:
        view = beta_session if self.dialect.is_beta else ga_session
        return view(self.session_id, self.settings)

    def emit(self, ga_name: str, **fields) -> None:
        name = self.dialect.name(ga_name)
        if name is not None:
            self._outbox.put_nowait({"type": name, "event_id": new_id("event"), **fields})

    def emit_error(self, error: RealtimeError, event_id: str | None = None) -> None:
        self.emit("error", error=error.payload(event_id))

    async def _write(self, send: Callable[[dict], Awaitable[None]]) -> None:
        while (event := await self._outbox.get()) is not None:
            await send(event)

    async def handle(self, raw: str | bytes) -> None:
        event_id = None
        try:
            event = self._parse(raw)
            event_id = event.get("event_id")
            handler = HANDLERS.get(event["type"])
            require(handler is not None, "unknown_event", f"unknown event type {event['type']!r}", "type")
            result = handler(self, event)
            if asyncio.iscoroutine(result):
                await result
        except RealtimeError as error:
            self.emit_error(error, event_id)

    @staticmethod
    def _parse(raw: str | bytes) -> dict:
        require(isinstance(raw, str), "invalid_message", "messages must be JSON text frames")
        try:
            event = json.loads(raw)
        except ValueError as exc:
            raise RealtimeError("invalid_json", f"message is not valid JSON: {exc}") from None
        require(isinstance(event, dict), "invalid_json", "a client event must be a JSON object")
        require(isinstance(event.get("type"), str), "missing_required_parameter", "event has no 'type'", "type")
        return event

    # session and input audio

    @property
    def is_ended(self) -> bool:
        return self.duplex is not None and self.duplex.failed

    def on_session_update(self, event: dict) -> None:
        duplex = duplex_request(event.get("session"))
        require(not duplex or self.duplex is not None or self.response is None, "conversation_already_has_active_response",
                "a response is in progress; duplex mode starts after it", "session.liveserve.duplex")
        settings = apply_update(self.settings, event.get("session"))
        if (self.duplex is not None) if duplex is None else duplex:  # duplex after this update: no turns to detect
            settings = replace(settings, turn_detection=None)
        if settings.instructions != self.settings.instructions:
            try:
                self.orch.set_instructions(self.session_id, settings.instructions)
            except ValueError as exc:
                raise RealtimeError("conversation_busy", str(exc), "session.instructions") from None
        if settings.turn_detection != self.settings.turn_detection:
            self.monitor.detector = self._detector(settings)
        self.settings = settings
        if duplex is not None:
            self._set_duplex(duplex)
        self.emit("session.updated", session=self._session_json())

    def _set_duplex(self, on: bool) -> None:
        if on and self.duplex is None:
            self.buffer.clear()
            self.duplex = DuplexLink(self.orch, self.session_id, self.emit, self.emit_error, self._on_frame_latency)
        elif not on and self.duplex is not None:
            self.duplex.close()
            self.duplex = None

    def on_append(self, event: dict) -> None:
        samples = decode_pcm16(event.get("audio"))
        if self.duplex is not None:
            self.duplex.push(samples)
            return
        audio_16k = self.buffer.append(samples)
        if self.settings.turn_detection is not None:
            for vad_event in self.monitor.feed_audio(audio_16k):
                self._on_vad(vad_event)

    def _on_vad(self, event) -> None:
        if isinstance(event, SpeechStarted):
            self.pending_user_item = new_id("item")
            self.speech_start_ms = event.audio_start_ms
            self.orch.note_speech_started(self.session_id)
            self.emit("input_audio_buffer.speech_started", audio_start_ms=event.audio_start_ms,
                      item_id=self.pending_user_item)
        elif isinstance(event, BargeIn) and self.settings.turn_detection.interrupt_response:
            if self.response is not None:
                self._interrupt("turn_detected")
            else:
                self._cut_generated_reply()
        elif isinstance(event, SpeechPaused):
            self.orch.note_speech_paused(self.session_id, self.settings.turn_detection.silence_duration_ms / 2000)
        elif isinstance(event, SpeechStopped):
            self.emit("input_audio_buffer.speech_stopped", audio_end_ms=event.audio_end_ms,
                      item_id=self.pending_user_item)
            audio = self.buffer.take(from_ms=self.speech_start_ms)
            self._commit_audio(audio, self.pending_user_item or new_id("item"))
            if self.settings.turn_detection.create_response:
                self._start_response(self.settings, time.monotonic())

    def on_commit(self, event: dict) -> None:
        require(self.buffer.num_samples >= MIN_COMMIT_MS * 16, "input_audio_buffer_commit_empty",
                f"buffer too small: at least {MIN_COMMIT_MS:.0f} ms of audio is needed to commit")
        self._commit_audio(self.buffer.take(), new_id("item"))

    def on_clear(self, event: dict) -> None:
        self.buffer.clear()
        self.emit("input_audio_buffer.cleared")

    def _commit_audio(self, audio: np.ndarray, item_id: str) -> None:
        previous = self.conversation.items[-1].item_id if self.conversation.items else None
        self.emit("input_audio_buffer.committed", previous_item_id=previous, item_id=item_id)
        self._add_user_item(item_id, [{"type": "input_audio", "transcript": None}], audio, "")
        self.pending_user_item = None

    def _add_user_item(self, item_id: str, content: list[dict], audio: np.ndarray | None, text: str) -> None:
        item = Item(item_id, "user", content)
        previous = self.conversation.add(item)
        item_json = message_item(item_id, "user", content)
        self.emit("conversation.item.added", previous_item_id=previous, item=item_json)
        task = self.orch.add_user_item(self.session_id, item_id, audio, text)
        task.add_done_callback(lambda t: self._user_item_done(t, item_json))
        self._track(task)

    def _user_item_done(self, task: asyncio.Task, item_json: dict) -> None:
        if task.cancelled():
            return
        if task.exception() is not None:
            self.conversation.remove(item_json["id"])
            self.emit_error(RealtimeError("item_rejected", str(task.exception()), "item"))
            return
        self.emit("conversation.item.done", item=item_json)

    # conversation items

    def on_item_create(self, event: dict) -> None:
        item = event.get("item")
        require(isinstance(item, dict), "missing_required_parameter", "item must be an object", "item")
        require(item.get("type", "message") == "message", "unsupported_item", "only message items are supported", "item.type")
        require(item.get("role") == "user", "unsupported_item", "only user messages can be created", "item.role")
        content = item.get("content")
        require(isinstance(content, list) and content, "missing_required_parameter", "item.content must be a non-empty list", "item.content")
        texts, audio = [], []
        for i, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in ("input_text", "text"):
                require(isinstance(part.get("text"), str), "invalid_type", "text must be a string", f"item.content[{i}].text")
                texts.append(part["text"])
            elif kind == "input_audio":
                audio.append(Resampler24to16().process(decode_pcm16(part.get("audio"))))
            else:
                raise RealtimeError("invalid_value", f"unsupported content type {kind!r}", f"item.content[{i}].type")
        item_id = item.get("id") if isinstance(item.get("id"), str) else new_id("item")
        require(self.conversation.get(item_id) is None, "duplicate_item_id", f"item {item_id!r} already exists", "item.id")
        parts = [{"type": "input_text", "text": t} for t in texts] + [{"type": "input_audio", "transcript": None}] * len(audio)
        self._add_user_item(item_id, parts, np.concatenate(audio) if audio else None, "\n".join(texts))

    def on_item_truncate(self, event: dict) -> None:
        item_id, end_ms = event.get("item_id"), event.get("audio_end_ms")
        item = self.conversation.get(item_id) if isinstance(item_id, str) else None
        require(item is not None, "item_not_found", f"no item {item_id!r}", "item_id")
        require(item.role == "assistant", "invalid_value", "only assistant audio can be truncated", "item_id")
        require(event.get("content_index", 0) == 0, "invalid_value", "content_index must be 0", "content_index")
        ok = isinstance(end_ms, (int, float)) and not isinstance(end_ms, bool) and 0 <= end_ms <= item.audio_ms + 1e-6
        require(ok, "invalid_value", f"audio_end_ms must be within the item's {item.audio_ms:.0f} ms of audio", "audio_end_ms")
        if self.response is not None and self.response.item is item and self.response.cancel_reason is None:
            self._interrupt("client_cancelled", heard_ms=float(end_ms))
        else:
            self._truncate_context(item, float(end_ms))
        self.monitor.playback.truncate(float(end_ms))
        self._emit_truncated(item, end_ms, float(end_ms))

    def _emit_truncated(self, item: Item, audio_end_ms: int | float, heard_ms: float) -> None:
        """conversation.item.truncated, with the item's unheard work at `heard_ms` as its latest figure."""
        extension = {} if item.turn is None else {"liveserve": self.report_unheard(item, item.turn.unheard(heard_ms))}
        self.emit("conversation.item.truncated", item_id=item.item_id, content_index=0, audio_end_ms=audio_end_ms,
                  **extension)

    def report_unheard(self, item: Item, unheard: UnheardWork) -> dict:
        """Count `unheard` as the item's latest figure (see ServerMetrics.count_unheard); return its `liveserve` JSON."""
        item.unheard_counted = self.metrics.count_unheard(item.unheard_counted, unheard)
        return unheard_json(unheard)

    def _truncate_context(self, item: Item, heard_ms: float) -> None:
        try:
            self.orch.truncate_item_audio(self.session_id, item.item_id, heard_ms)
        except (KeyError, ValueError) as exc:
            raise RealtimeError("invalid_value", str(exc), "item_id") from None

    def on_item_delete(self, event: dict) -> None:
        item_id = event.get("item_id")
        item = self.conversation.get(item_id) if isinstance(item_id, str) else None
        require(item is not None, "item_not_found", f"no item {item_id!r}", "item_id")
        require(self.response is None or self.response.item is not item, "invalid_value",
                "the item of the response in progress cannot be deleted", "item_id")
        try:
            self.orch.delete_item(self.session_id, item_id)
        except ValueError as exc:
            raise RealtimeError("conversation_busy", str(exc), "item_id") from None
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
        extension = (body or {}).get("liveserve") or {}
        require(isinstance(extension, dict), "invalid_type", "liveserve must be an object", "response.liveserve")
        ignore_eos = extension.get("ignore_eos", False)
        require(isinstance(ignore_eos, bool), "invalid_type", "ignore_eos must be a boolean", "response.liveserve.ignore_eos")
        self._start_response(settings, time.monotonic(), ignore_eos)

    def _start_response(self, settings: SessionSettings, turn_end: float, ignore_eos: bool = False) -> None:
        if self.response is not None:
            self.emit_error(RealtimeError("conversation_already_has_active_response", "a response is already in progress"))
            return
        stream = ResponseStream(self, settings, turn_end)
        self.response = stream
        stream.open()
        request = TurnRequest(speak=stream.speak, max_tokens=settings.max_output_tokens,
                              temperature=settings.temperature, ignore_eos=ignore_eos)
        turn = self.orch.start_turn(self.session_id, request, item_id=stream.item.item_id)
        stream.item.turn = turn
        self._track(asyncio.ensure_future(self._run_response(stream, turn)))

    async def _run_response(self, stream: ResponseStream, turn) -> None:
        try:
            await stream.pump(turn)
        finally:
            if self.response is stream:
                self.response = None

    def on_response_cancel(self, event: dict) -> None:
        require(self.response is not None, "response_cancel_not_active", "there is no response in progress to cancel")
        self._interrupt("client_cancelled")

    def _interrupt(self, reason: str, heard_ms: float | None = None) -> None:
        stream = self.response
        if stream is None or stream.cancel_reason is not None:
            return
        heard = self.monitor.playback.played_ms() if heard_ms is None else heard_ms
        stream.cancel_reason = reason
        self.orch.cancel_turn(self.session_id, heard_ms=heard if stream.speak else None)
        if reason == "turn_detected" and stream.speak:
            self.monitor.playback.truncate(heard)
            self._emit_truncated(stream.item, int(heard), heard)

    def _cut_generated_reply(self) -> None:
        """Speech over a reply that finished generating but is still playing: keep in the
        context what was heard, as a client's truncate would."""
        item = self.conversation.get(self.monitor.playback.item_id or "")
        if item is None or item.role != "assistant":
            return
        heard = self.monitor.playback.played_ms()
        self._truncate_context(item, heard)
        self.monitor.playback.truncate(heard)
        self._emit_truncated(item, int(heard), heard)

    def on_playback_ack(self, event: dict) -> None:
        played = event.get("played_ms")
        ok = isinstance(played, (int, float)) and not isinstance(played, bool) and played >= 0
        require(ok, "invalid_value", f"played_ms must be a non-negative number, got {played!r}", "played_ms")
        item_id = event.get("item_id")
        require(item_id is None or isinstance(item_id, str), "invalid_type", "item_id must be a string", "item_id")
        if self.monitor.playback.ack(float(played), item_id):
            self.report_playback()

    def report_playback(self) -> None:
        """Tell the stages' schedulers where the user's playback of the current reply stands."""
        now, playback = time.monotonic(), self.monitor.playback
        self.orch.note_playback(self.session_id, playback.first_audio_sent, now + playback.buffer_ms(now) / 1000)

    # lifetime

    def _track(self, task: asyncio.Task) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """The one teardown path: cancel the response, free the session in every stage."""
        if self.response is not None:
            self.response.cancel_reason = "session_closed"
        self.orch.close_session(self.session_id)
        for task in list(self._tasks):
            task.cancel()
        self._outbox.put_nowait(None)
        await asyncio.gather(self._writer, *self._tasks, return_exceptions=True)


HANDLERS: dict[str, Callable[[RealtimeSession, dict], object]] = {
    "session.update": RealtimeSession.on_session_update,
    "input_audio_buffer.append": RealtimeSession.on_append,
    "input_audio_buffer.commit": RealtimeSession.on_commit,
    "input_audio_buffer.clear": RealtimeSession.on_clear,
    "conversation.item.create": RealtimeSession.on_item_create,
    "conversation.item.truncate": RealtimeSession.on_item_truncate,
    "conversation.item.delete": RealtimeSession.on_item_delete,
    "response.create": RealtimeSession.on_response_create,
    "response.cancel": RealtimeSession.on_response_cancel,
    "playback.ack": RealtimeSession.on_playback_ack,
}
