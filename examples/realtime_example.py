"""What the Python examples share: a stand-in microphone (the shipped speech clips, streamed in real time
with silence between them, as a live microphone would send: 24 kHz mono PCM16, 20 ms chunks), what they
read of the server's events, and the command line."""

from __future__ import annotations

import argparse
import asyncio
import json
import wave
from collections import Counter
from collections.abc import Awaitable, Callable

from lab.clips import clips_dir

RATE, CHUNK_MS = 24000, 20
CHUNK_BYTES = RATE * CHUNK_MS // 1000 * 2


def clip(name: str) -> bytes:
    """A shipped clip (lab/clips) as 24 kHz mono PCM16 bytes."""
    with wave.open(str(clips_dir() / name), "rb") as wav:
        return wav.readframes(wav.getnframes())


class Microphone:
    """Calls `send(chunk)` every 20 ms from `start` to `stop`: queued speech, else silence."""

    def __init__(self, send: Callable[[bytes], Awaitable[None]]) -> None:
        self.send = send
        self._queued = bytearray()
        self._task: asyncio.Task | None = None

    def say(self, name: str) -> None:
        """Speak a clip next (after what is still queued)."""
        self._queued += clip(name)

    @property
    def speaking(self) -> bool:
        return bool(self._queued)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._stream())

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _stream(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            chunk = bytes(self._queued[:CHUNK_BYTES]).ljust(CHUNK_BYTES, b"\0")
            del self._queued[:CHUNK_BYTES]
            await self.send(chunk)
            next_at += CHUNK_MS / 1000
            await asyncio.sleep(max(0.0, next_at - loop.time()))


class ServerEvents:
    """What an example reads of the server's events (`record` each): counts by type, the `error` events,
    each response.done in order, whether reply audio came (`audio`, cleared by the reader) and the items
    the server cut."""

    def __init__(self) -> None:
        self.types, self.errors = Counter(), []
        self.done: asyncio.Queue[dict] = asyncio.Queue()
        self.audio = asyncio.Event()
        self.truncated: set[str] = set()

    def record(self, data: dict) -> None:
        self.types[data["type"]] += 1
        if data["type"] == "error":
            self.errors.append(data["error"])
        elif data["type"] == "response.output_audio.delta":
            self.audio.set()
        elif data["type"] == "response.done":
            self.done.put_nowait(data["response"])
        elif data["type"] == "conversation.item.truncated":
            self.truncated.add(data["item_id"])


async def answer_to_last_words(microphone: Microphone, next_reply: Callable[[], Awaitable[dict]]) -> dict:
    """The first reply to end uncut once the microphone has said everything queued: semantic_vad may end a
    turn at a pause inside the words, and the words after the pause then cut the reply it started."""
    while microphone.speaking:
        await asyncio.sleep(0.02)
    while (reply := await next_reply())["status"] == "cancelled":
        pass
    return reply


def main(turns: Callable[[str, str], Awaitable[dict]], description: str) -> None:
    """`turns(url, api_key)` for the command line's URL and key; prints its result as one JSON line."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("url", help="the realtime WebSocket URL, e.g. ws://127.0.0.1:8000/v1/realtime")
    parser.add_argument("--api-key", default="unused", help="a key of server.api_keys (any text without keys)")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(turns(args.url, args.api_key))))
