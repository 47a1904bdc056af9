"""One duplex session over /v1/realtime: open, turn duplex on, stream speech in real time, log frames."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import websockets
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from lab.client.audio import SAMPLE_RATE, encode_audio
from lab.duplex.records import REJECTED, FrameEvent, ServerError, SessionLog
from lab.duplex.speech_loop import LoopedSpeech

FRAME_EVENT = "liveserve.duplex.frame"
DUPLEX_ON = {"type": "session.update", "session": {"liveserve": {"duplex": True}}}


@dataclass(frozen=True)
class StreamSetup:
    """What every stream of a run shares. `clock` gives seconds from the start of the run; `connect(url)`,
    when given, opens the connection instead of a websocket (a simulation's in-memory one)."""

    url: str
    speech: LoopedSpeech
    frame_ms: int
    chunk_ms: int
    clock: Callable[[], float]
    handshake_timeout_s: float = 10.0
    connect: Callable[[str], Awaitable[Any]] | None = None

    async def open(self) -> Any:
        if self.connect is not None:
            return await self.connect(self.url)
        return await websockets.connect(self.url, open_timeout=self.handshake_timeout_s, max_size=None,
                                        compression=None, proxy=None)


async def run_stream(log: SessionLog, setup: StreamSetup, *, speech_start: int, stop_at: float,
                     listen_until: float) -> SessionLog:
    """Fill `log` with one session: speech from sample `speech_start` of the loop until
    `stop_at`, frames received until `listen_until` (or until the server closes)."""
    try:
        ws = await setup.open()
        try:
            if await _open(ws, log, setup):
                await _stream(ws, log, setup, speech_start, stop_at, listen_until)
        finally:
            await ws.close()
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
        log.failure = log.failure or f"cannot connect to {setup.url}: {exc!r}"
    log.end_t = setup.clock()
    return log


async def _open(ws: Any, log: SessionLog, setup: StreamSetup) -> bool:
    """`session.created`, then duplex on; False when rejected or refused (the log says which)."""
    try:
        async with asyncio.timeout(setup.handshake_timeout_s):
            event, t = await _receive_one(ws, setup)
            if event.get("type") != "session.created":
                _refused(log, event, t, "expected session.created")
                return False
            log.admitted_t, log.session_id = t, (event.get("session") or {}).get("id")
            await ws.send(json.dumps(DUPLEX_ON))
            while event.get("type") != "session.updated":
                event, t = await _receive_one(ws, setup)
                if event.get("type") == "error":
                    _refused(log, event, t, "duplex refused")
                    return False
            return True
    except TimeoutError:
        log.failure = f"no session.created and session.updated within {setup.handshake_timeout_s:g} s"
    except ConnectionClosed as exc:
        log.failure = f"connection closed during the handshake ({exc})"
    except ValueError as exc:
        log.failure = f"a message that is not JSON during the handshake: {exc}"
    return False


async def _receive_one(ws: Any, setup: StreamSetup) -> tuple[dict, float]:
    message = await ws.recv()
    return json.loads(message), setup.clock()


def _refused(log: SessionLog, event: dict, t: float, what: str) -> None:
    if event.get("type") != "error":
        log.failure = f"{what}, got {event.get('type')!r}"
        return
    error = _server_error(event, t)
    log.errors.append(error)
    if error.code == REJECTED:
        log.rejected_t = t
    else:
        log.failure = f"{what}: {error.code}: {error.message}"


async def _stream(ws: Any, log: SessionLog, setup: StreamSetup, speech_start: int, stop_at: float,
                  listen_until: float) -> None:
    receiver = asyncio.create_task(_receive(ws, log, setup.clock))
    try:
        await _send_speech(ws, log, setup, speech_start, stop_at)
        await asyncio.wait([receiver], timeout=max(0.0, listen_until - setup.clock()))
    finally:
        receiver.cancel()
        await asyncio.gather(receiver, return_exceptions=True)


async def _send_speech(ws: Any, log: SessionLog, setup: StreamSetup, speech_start: int, stop_at: float) -> None:
    """Chunk j goes out once the wall clock says it has been spoken: at start + j x chunk,
    on a fixed schedule (a late send does not delay the next)."""
    chunk_samples = SAMPLE_RATE * setup.chunk_ms // 1000
    frame_samples = SAMPLE_RATE * setup.frame_ms // 1000
    origin = log.stream_start_t = setup.clock()
    sent = 0
    for j in itertools.count(1):
        due = origin + j * setup.chunk_ms / 1000
        if due > stop_at or log.server_closed_t is not None or log.is_failed:
            return
        await asyncio.sleep(due - setup.clock())
        pcm = setup.speech.chunk(speech_start + sent, chunk_samples)
        try:
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": encode_audio(pcm)}))
        except ConnectionClosed:
            return
        sent += chunk_samples
        now = setup.clock()
        while (len(log.frame_due_t) + 1) * frame_samples <= sent:
            log.frame_due_t.append(now)


async def _receive(ws: Any, log: SessionLog, clock: Callable[[], float]) -> None:
    """Log frames and errors until the server closes the connection (our own close cancels this)."""
    try:
        async for message in ws:
            t = clock()
            event = json.loads(message)
            if event.get("type") == FRAME_EVENT:
                log.frames.append(_frame(event, t))
            elif event.get("type") == "error":
                log.errors.append(_server_error(event, t))
    except ConnectionClosed:
        pass
    except (ValueError, TypeError) as exc:
        log.failure = f"a message the client cannot read: {exc}"
        return
    log.server_closed_t = clock()
    if not log.errors:
        log.failure = f"the server closed the connection without an error event (code {ws.close_code})"


def _frame(event: dict, t: float) -> FrameEvent:
    latency = event.get("latency_ms")
    return FrameEvent(t, int(event.get("frame_index", -1)), None if latency is None else float(latency),
                      _count(event.get("context_tokens")))


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


def _server_error(event: dict, t: float) -> ServerError:
    error = event.get("error") or {}
    return ServerError(t, error.get("code"), str(error.get("message", "")))
