"""Test harness: a real LiveServe server on 127.0.0.1 and a small websocket client for driving it."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import wave
from pathlib import Path

import numpy as np
import websockets
import yaml

from lab.clips import clips_dir
from lab.server_process import ServerProcess
from liveserve.config.loader import lab_config_path

FIXTURES = clips_dir()


def fixture_pcm16(name: str) -> np.ndarray:
    with wave.open(str(FIXTURES / name), "rb") as wav:
        return np.frombuffer(wav.readframes(wav.getnframes()), "<i2")


def small_config(tmp_dir: Path, runtime: dict | None = None, **server) -> Path:
    """The lab's config (tiny-omni-cpu) with a smaller thinker, so a test turn takes little CPU (`runtime` and
    `server` settings updated)."""
    data = yaml.safe_load(lab_config_path().read_text())
    data["model"]["thinker"].update(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32,
                                    intermediate_size=256)
    data["runtime"].update(runtime or {})
    data["server"].update(server)
    path = tmp_dir / "server.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class Client:
    """Sends client events and collects every server event with its arrival time."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.events: list[tuple[float, dict]] = []
        self._cursor = 0

    async def send(self, type_: str, **fields) -> None:
        await self.ws.send(json.dumps({"type": type_, **fields}))

    async def append(self, pcm16: np.ndarray, realtime: bool = True, chunk_ms: int = 20) -> None:
        step = 24 * chunk_ms
        for i in range(0, len(pcm16), step):
            await self.send("input_audio_buffer.append", audio=base64.b64encode(pcm16[i : i + step].tobytes()).decode())
            if realtime:
                await asyncio.sleep(chunk_ms / 1000)

    async def next(self, type_: str, timeout: float = 30.0) -> dict:
        """The next event of `type_` after those already consumed."""
        deadline = time.monotonic() + timeout
        while True:
            for index in range(self._cursor, len(self.events)):
                if self.events[index][1]["type"] == type_:
                    self._cursor = index + 1
                    return self.events[index][1]
            self._cursor = len(self.events)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {type_} within {timeout} s; got {[e['type'] for _, e in self.events[-10:]]}")
            try:
                message = await asyncio.wait_for(self.ws.recv(), remaining)
            except TimeoutError:
                continue
            self.events.append((time.monotonic(), json.loads(message)))

    async def ask(self, text: str, **response) -> None:
        """A user text item, then response.create with `response` overrides."""
        await self.send("conversation.item.create", item={
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        await self.send("response.create", response=response)

    def received(self, type_: str) -> list[dict]:
        return [e for _, e in self.events if e["type"] == type_]


def connect(server: ServerProcess, **kwargs):
    return websockets.connect(server.url + "?model=tiny-omni", max_size=2**25, **kwargs)


async def refused(server: ServerProcess) -> tuple[dict, int]:
    """Open one more connection and return the server's refusal: its first event and the close code."""
    async with connect(server) as ws:
        event = json.loads(await ws.recv())
        try:
            await ws.recv()
        except websockets.ConnectionClosed as closed:
            return event, closed.rcvd.code
    raise AssertionError(f"the server sent {event} and more on a connection it should have refused")


def silence(ms: int) -> np.ndarray:
    return np.zeros(24 * ms, "<i2")
