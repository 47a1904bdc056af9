"""An asyncio client for the OpenAI Realtime API (GA events) with LiveServe playback acks."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from typing import Any, Callable

import numpy as np
import websockets
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from lab.client.audio import SAMPLE_RATE, decode_audio, encode_audio
from lab.client.records import LoggedEvent, TurnRecord, log_entry
from lab.client.turns import TurnTracker

MAX_CATCH_UP_S = 0.1  # a mic stream lagging less than this catches up; longer idle restarts it


class RealtimeError(RuntimeError):
    """The connection failed or closed; the message is fit for a user."""


def default_session(*, threshold: float = 0.5, prefix_padding_ms: int = 300, silence_duration_ms: int = 500,
                    max_output_tokens: int | str = "inf") -> dict[str, Any]:
    """`session.update` fields: audio in and out as 24 kHz PCM16, server VAD that
    creates responses and lets speech interrupt them."""
    pcm = {"type": "audio/pcm", "rate": SAMPLE_RATE}
    vad = {"type": "server_vad", "threshold": threshold, "prefix_padding_ms": prefix_padding_ms,
           "silence_duration_ms": silence_duration_ms, "create_response": True, "interrupt_response": True}
    return {"output_modalities": ["audio"], "max_output_tokens": max_output_tokens,
            "audio": {"input": {"format": pcm, "turn_detection": vad}, "output": {"format": dict(pcm)}}}


class RealtimeClient:
    """One realtime session over a websocket.

    - `async with RealtimeClient(url) as client:` connects, starts the receive and ack
      loops and returns once `session.created` arrived; failures raise RealtimeError.
      It does not offer permessage-deflate: base64 PCM shrinks by only a quarter, for
      about 3 ms of server CPU per second of reply audio.
    - Every server event is appended to `events` and every sent one to `sent`, stamped
      with `clock()` (a real-time clock in seconds); audio payloads are logged as sizes.
    - Each response becomes a TurnRecord in `turns`, built by a TurnTracker (see there
      for playback and turn-end rules).
    - While the current reply has played further than last acked, `playback.ack` is sent
      every `ack_interval_s` (so once more after it finishes).
    - If `stop_on_speech`, `speech_started` during a reply in progress stops its playback,
      acks the final position and, if `truncate_on_barge_in`, truncates the item there.
    - With `realtime=True`, `stream_audio` never sends audio faster than the real clock,
      across calls (one mic stream per session).
    - `connect(url)`, when given, opens the connection instead of a websocket (a simulation's
      in-memory one: `send`, `close`, async iteration over messages).
    """

    def __init__(self, url: str, *, clock: Callable[[], float] = time.monotonic, ack_interval_s: float = 0.2,
                 stop_on_speech: bool = True, truncate_on_barge_in: bool = True, keep_audio: bool = True,
                 open_timeout_s: float = 5.0, connect: Callable[[str], Awaitable[Any]] | None = None) -> None:
        self.url, self.clock, self.ack_interval_s = url, clock, ack_interval_s
        self.stop_on_speech, self.truncate_on_barge_in = stop_on_speech, truncate_on_barge_in
        self.open_timeout_s, self.connect = open_timeout_s, connect
        self.events: list[LoggedEvent] = []
        self.sent: list[LoggedEvent] = []
        self.tracker = TurnTracker(clock, keep_audio)
        self.session: dict[str, Any] = {}
        self.audio_sent_ms = 0.0
        self.closed_reason: str | None = None
        self._last: dict[str, LoggedEvent] = {}
        self._next_chunk_t = 0.0
        self._changed = asyncio.Condition()
        self._ws: Any = None
        self._tasks: list[asyncio.Task] = []

    @property
    def turns(self) -> list[TurnRecord]:
        """One record per response, in order of creation."""
        return self.tracker.turns

    # -- connection -------------------------------------------------------------------

    async def __aenter__(self) -> RealtimeClient:
        self._ws = await self._open()
        self._tasks = [asyncio.create_task(self._receive_loop()), asyncio.create_task(self._ack_loop())]
        try:
            await self.wait_for("session.created", timeout=self.open_timeout_s)
        except asyncio.TimeoutError:
            await self.close()
            raise RealtimeError(f"{self.url} sent no session.created within {self.open_timeout_s} s") from None
        except BaseException:
            await self.close()
            raise
        return self

    async def _open(self) -> Any:
        if self.connect is not None:
            return await self.connect(self.url)
        try:
            return await websockets.connect(self.url, open_timeout=self.open_timeout_s, max_size=None, proxy=None,
                                            compression=None)
        except InvalidURI as exc:
            raise RealtimeError(f"bad realtime URL {self.url!r}: {exc}") from None
        except (OSError, asyncio.TimeoutError, InvalidHandshake) as exc:
            raise RealtimeError(f"cannot connect to {self.url}: {exc}") from None

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the loops and close the socket; safe to call twice."""
        self.closed_reason = self.closed_reason or "closed by client"
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._ws is not None:
            await self._ws.close()

    # -- waiting ----------------------------------------------------------------------

    async def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> None:
        """Return once `predicate()` holds (checked after every server event).

        asyncio.TimeoutError after `timeout` s; RealtimeError if the connection closes first.
        """
        def settled() -> bool:
            return predicate() or self.closed_reason is not None

        async def wait() -> None:
            async with self._changed:
                await self._changed.wait_for(settled)

        await asyncio.wait_for(wait(), timeout)
        if not predicate():
            raise RealtimeError(f"connection closed: {self.closed_reason}")

    async def wait_for(self, type_: str, *, since: int = 0, timeout: float | None = None) -> LoggedEvent:
        """The first server event of `type_` at index >= `since` in `events`, waiting if needed."""
        found: list[LoggedEvent] = []

        def scan() -> bool:
            nonlocal since
            while not found and since < len(self.events):
                if self.events[since].type == type_:
                    found.append(self.events[since])
                since += 1
            return bool(found)

        await self.wait_until(scan, timeout)
        return found[0]

    def last_event(self, type_: str) -> LoggedEvent | None:
        """The latest server event of `type_`, if any."""
        return self._last.get(type_)

    def is_playing(self) -> bool:
        """Whether reply audio is audible now."""
        playing = self.tracker.playing
        return playing is not None and playing.player.is_playing()

    # -- client events ----------------------------------------------------------------

    async def update_session(self, **fields: Any) -> None:
        await self._send({"type": "session.update", "session": {"type": "realtime", **fields}})

    async def stream_audio(self, pcm_24k_int16: np.ndarray, chunk_ms: int = 20, realtime: bool = True) -> None:
        """Send 24 kHz mono int16 audio as `input_audio_buffer.append` chunks of `chunk_ms`."""
        pcm = np.asarray(pcm_24k_int16)
        if pcm.dtype != np.int16 or pcm.ndim != 1:
            raise ValueError(f"expected 1-D int16 samples at 24 kHz, got {pcm.dtype} with shape {pcm.shape}")
        step = SAMPLE_RATE * chunk_ms // 1000
        for start in range(0, len(pcm), step):
            chunk = pcm[start:start + step]
            if realtime:
                await self._wait_for_mic(len(chunk) / SAMPLE_RATE)
            await self._send({"type": "input_audio_buffer.append", "audio": encode_audio(chunk)}, chunk.nbytes)
            self.audio_sent_ms += len(chunk) * 1000 / SAMPLE_RATE

    async def _wait_for_mic(self, chunk_s: float) -> None:
        """Sleep until the mic stream has captured the next chunk, then book its duration."""
        delay = self._next_chunk_t - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)
        self._next_chunk_t = max(self._next_chunk_t, self.clock() - MAX_CATCH_UP_S) + chunk_s

    async def commit(self) -> None:
        self.tracker.mark_turn_end(self.clock())
        await self._send({"type": "input_audio_buffer.commit"})

    async def create_response(self, turn_end_t: float | None = None, **overrides: Any) -> None:
        """`response.create`, with `overrides` as its `response` object if given; the reply's TTFP counts from
        `turn_end_t` (default: now)."""
        self.tracker.mark_turn_end(self.clock() if turn_end_t is None else turn_end_t)
        await self._send({"type": "response.create", **({"response": overrides} if overrides else {})})

    async def cancel_response(self) -> None:
        await self._send({"type": "response.cancel"})

    async def truncate(self, item_id: str, audio_end_ms: float) -> None:
        await self._send({"type": "conversation.item.truncate", "item_id": item_id,
                          "content_index": 0, "audio_end_ms": int(audio_end_ms)})

    async def send_text_item(self, text: str) -> None:
        """Add a user text message to the conversation (no response is requested)."""
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        await self._send({"type": "conversation.item.create", "item": item})

    async def stop_playback(self) -> float | None:
        """Stop the reply in progress now and ack where it stopped.

        Returns the played ms, or None if no reply was in progress.
        """
        now = self.clock()
        turn = self.tracker.in_progress(now)
        if turn is None:
            return None
        turn.interrupted_t = now
        played = turn.player.stop(now)
        await self._ack(turn, played)
        return played

    async def _barge_in(self) -> None:
        """The user spoke over the reply: stop it and truncate the item where it stopped."""
        turn = self.tracker.playing
        played = await self.stop_playback()
        if played is not None and self.truncate_on_barge_in and turn.item_id is not None:
            await self.truncate(turn.item_id, played)

    async def _ack(self, turn: TurnRecord, played_ms: float) -> None:
        turn.acked_ms = played_ms
        event: dict[str, Any] = {"type": "playback.ack", "played_ms": round(played_ms, 1)}
        if turn.item_id is not None:
            event["item_id"] = turn.item_id
        await self._send(event)

    async def _send(self, event: dict[str, Any], audio_bytes: int = 0) -> None:
        if self._ws is None or self.closed_reason is not None:
            raise RealtimeError(f"not connected ({self.closed_reason or 'never opened'})")
        try:
            await self._ws.send(json.dumps(event))
        except ConnectionClosed as exc:
            raise RealtimeError(f"connection closed: {exc}") from None
        self.sent.append(log_entry(self.clock(), event, audio_bytes))

    # -- loops ------------------------------------------------------------------------

    async def _receive_loop(self) -> None:
        reason = "closed by server"
        try:
            async for message in self._ws:
                await self._on_message(message)
                async with self._changed:
                    self._changed.notify_all()
        except ConnectionClosed as exc:
            reason = f"closed by server ({exc})"
        except Exception as exc:
            reason = f"client receive loop failed: {exc!r}"
            raise
        finally:
            self.closed_reason = self.closed_reason or reason
            async with self._changed:
                self._changed.notify_all()

    async def _ack_loop(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.ack_interval_s)
                await self._ack_progress()
        except RealtimeError:
            return

    async def _ack_progress(self) -> None:
        turn = self.tracker.playing
        if turn is not None and not turn.player.is_stopped:
            played = turn.player.played_ms()
            if played > turn.acked_ms:
                await self._ack(turn, played)

    async def _on_message(self, message: str | bytes) -> None:
        t = self.clock()
        try:
            event = json.loads(message)
            pcm = decode_audio(event["delta"]) if event.get("type") == "response.output_audio.delta" else b""
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            event, pcm = {"type": "client.bad_message", "error": str(exc), "size": len(message)}, b""
        entry = log_entry(t, event, len(pcm))
        self.events.append(entry)
        self._last[entry.type] = entry
        if entry.type in ("session.created", "session.updated"):
            self.session = event.get("session", {})
        self.tracker.on_event(event, t, pcm)
        if entry.type == "input_audio_buffer.speech_started" and self.stop_on_speech:
            await self._barge_in()
