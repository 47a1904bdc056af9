"""RealtimeClient, run_conversation and `liveserve client` against a scripted fake server."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
import wave
from contextlib import asynccontextmanager

import numpy as np
import pytest
import websockets

from lab.client import ConversationScript, RealtimeClient, RealtimeError, default_session, run_conversation
from lab.client.audio import silence
from liveserve.cli import main

SPEECH_LEVEL = 1000  # the fake VAD: a chunk is speech if any sample is louder than this
STEADY_REPLY = [(0.15, 100), (0.05, 100), (0.25, 100)]  # (delay s, ms of audio): 150 ms TTFP, one underrun


def tone(ms: int) -> np.ndarray:
    t = np.arange(24 * ms) / 24000
    return (0.3 * 32767 * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


class FakeRealtimeServer:
    """Scripted realtime server: energy VAD, one response per utterance, speech cancels a reply.

    The user's turn ends after `silence_ms` of silence; each response then sends `reply`
    audio deltas (delay before each, duration). Every client event lands in `received`.
    """

    def __init__(self, reply: list[tuple[float, int]], silence_ms: int = 100) -> None:
        self.reply, self.silence_ms = reply, silence_ms
        self.received: list[tuple[float, dict]] = []
        self.speech_chunk_t: list[float] = []
        self.is_speaking, self.silent_ms, self.num_responses = False, 0.0, 0
        self.response: asyncio.Task | None = None

    def events(self, type_: str) -> list[dict]:
        return [event for _, event in self.received if event["type"] == type_]

    async def handle(self, ws) -> None:
        await ws.send(json.dumps({"type": "session.created", "session": {"id": "sess_1"}}))
        async for raw in ws:
            event = json.loads(raw)
            self.received.append((time.monotonic(), event))
            if event["type"] == "session.update":
                await ws.send(json.dumps({"type": "session.updated", "session": event["session"]}))
            elif event["type"] == "input_audio_buffer.append":
                await self._on_audio(ws, np.frombuffer(base64.b64decode(event["audio"]), "<i2"))

    async def _on_audio(self, ws, pcm: np.ndarray) -> None:
        if np.abs(pcm.astype(np.int32)).max(initial=0) > SPEECH_LEVEL:
            self.speech_chunk_t.append(time.monotonic())
            self.silent_ms = 0.0
            if not self.is_speaking:
                self.is_speaking = True
                await ws.send(json.dumps({"type": "input_audio_buffer.speech_started", "audio_start_ms": 0}))
                if self.response is not None:
                    self.response.cancel()
            return
        self.silent_ms += len(pcm) / 24
        if self.is_speaking and self.silent_ms >= self.silence_ms:
            self.is_speaking = False
            await ws.send(json.dumps({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 0}))
            self.num_responses += 1
            self.response = asyncio.create_task(self._respond(ws, self.num_responses))

    async def _respond(self, ws, n: int) -> None:
        ids = {"response_id": f"resp_{n}", "item_id": f"item_{n}"}
        await ws.send(json.dumps({"type": "response.created", "response": {"id": ids["response_id"]}}))
        await ws.send(json.dumps({"type": "response.output_item.added", "response_id": ids["response_id"],
                                  "item": {"id": ids["item_id"]}}))
        status = "completed"
        try:
            for delay, ms in self.reply:
                await asyncio.sleep(delay)
                audio = base64.b64encode(tone(ms).tobytes()).decode()
                await ws.send(json.dumps({"type": "response.output_audio.delta", **ids, "delta": audio}))
                await ws.send(json.dumps({"type": "response.output_audio_transcript.delta", **ids, "delta": "w "}))
        except asyncio.CancelledError:
            status = "cancelled"
        response = {"id": ids["response_id"], "status": status, "usage": {"output_tokens": 3}}
        await ws.send(json.dumps({"type": "response.done", "response": response}))


@asynccontextmanager
async def fake_server(reply: list[tuple[float, int]]):
    server = FakeRealtimeServer(reply)
    async with websockets.serve(server.handle, "127.0.0.1", 0) as ws_server:
        port = ws_server.sockets[0].getsockname()[1]
        yield server, f"ws://127.0.0.1:{port}/v1/realtime"


def test_one_turn_is_recorded_played_and_acked():
    async def scenario():
        async with fake_server(STEADY_REPLY) as (server, url):
            async with RealtimeClient(url) as client:
                await client.update_session(**default_session())
                await client.stream_audio(np.concatenate([tone(200), silence(200)]))
                await client.wait_for("response.done", timeout=5)
                await asyncio.sleep(client.tracker.playing.player.drained_at - client.clock() + 0.3)
            return server, client

    server, client = asyncio.run(scenario())
    turn, = client.turns
    stopped = client.last_event("input_audio_buffer.speech_stopped")
    assert client.session["type"] == "realtime"  # session.updated echoed our update
    assert (turn.response_id, turn.item_id, turn.status) == ("resp_1", "item_1", "completed")
    assert turn.usage == {"output_tokens": 3} and turn.transcript == "w w w "
    assert turn.first_audio_t <= turn.first_text_t < turn.first_audio_t + 0.04  # sent right after the first audio
    assert turn.audio_bytes == 300 * 48 and turn.audio_ms == pytest.approx(300)
    assert turn.turn_end_t == stopped.t
    assert 140 <= turn.ttfp_ms < 400  # the server waits 150 ms before the first delta
    assert turn.last_audio_t - turn.first_audio_t == pytest.approx(0.30, abs=0.1)
    # deltas at +0, +50 ms, +300 ms: dry from +200 ms to +300 ms
    assert turn.player.num_underruns == 1 and turn.player.max_underrun_ms == pytest.approx(100, abs=60)
    acks = server.events("playback.ack")
    played = [ack["played_ms"] for ack in acks]
    assert len(acks) >= 2 and {ack["item_id"] for ack in acks} == {"item_1"}
    assert played == sorted(set(played)) and played[-1] == pytest.approx(300)
    appends = [event for event in client.sent if event.type == "input_audio_buffer.append"]
    assert len(appends) == 20 and appends[0].data == {"type": "input_audio_buffer.append", "audio_bytes": 960}
    assert client.audio_sent_ms == pytest.approx(400)
    assert appends[-1].t - appends[0].t == pytest.approx(0.38, abs=0.1)  # paced in real time


def test_barge_in_is_spoken_after_first_audio_and_stops_playback():
    reply = [(0.15, 100)] + [(0.05, 100)] * 9  # 1 s of audio over 600 ms
    script = ConversationScript(tone(200), tone(200), barge_in_after_ms=100, trailing_silence_ms=200, timeout_s=10)

    async def scenario():
        async with fake_server(reply) as (server, url):
            return server, await run_conversation(url, script)

    server, result = asyncio.run(scenario())
    first, second = result.turns
    # the barge-in clip starts 100 ms after the first audio, and the server hears it after that
    assert result.barge_in_t >= first.first_audio_t + 0.1
    assert [t for t in server.speech_chunk_t if t > first.first_audio_t][0] >= first.first_audio_t + 0.1
    # the interrupted reply stopped where the user cut in; the server was told where
    assert (first.status, first.interrupted_t is not None) == ("cancelled", True)
    heard = first.player.played_ms()
    assert 100 <= heard < 400
    truncate, = server.events("conversation.item.truncate")
    assert truncate == {"type": "conversation.item.truncate", "item_id": "item_1", "content_index": 0,
                        "audio_end_ms": int(heard)}
    assert [ack for ack in server.events("playback.ack") if ack["item_id"] == "item_1"][-1]["played_ms"] == round(heard, 1)
    # the barge-in got its own reply, heard to the end
    assert (second.status, second.audio_ms, result.status) == ("completed", pytest.approx(1000), "completed")
    assert len(result.heard_audio()) == int(heard * 24) * 2 + 1000 * 48
    summary = result.summary()
    assert summary["barged_in"] and [t["interrupted"] for t in summary["turns"]] == [True, False]


def test_cli_reports_the_reply_and_writes_it(tmp_path, capsys):
    wav_path = write_wav(tmp_path / "speech.wav", tone(200))
    out = tmp_path / "reply.wav"

    async def scenario():
        async with fake_server(STEADY_REPLY) as (server, url):
            # the command runs its own event loop, so it gets a thread of its own
            args = ["client", "--wav", str(wav_path), "--url", url, "--out", str(out), "--json"]
            return await asyncio.to_thread(main, args)

    code = asyncio.run(scenario())
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert (summary["status"], summary["audio_s"], summary["num_underruns"]) == ("completed", 0.3, 1)
    assert summary["audio_ttfp_ms"] >= 140 and summary["transcript"] == "w w w "
    with wave.open(str(out), "rb") as reply:
        assert (reply.getframerate(), reply.getnframes()) == (24000, 300 * 24)


def test_cli_errors_are_one_line_and_exit_2(tmp_path, capsys):
    speech = write_wav(tmp_path / "speech.wav", tone(100))
    not_wav = tmp_path / "notes.wav"
    not_wav.write_text("not audio")
    cases = [
        (["--wav", str(speech), "--url", f"ws://127.0.0.1:{free_port()}/v1/realtime"], "cannot connect"),
        (["--wav", str(speech), "--url", "http://127.0.0.1:1/v1/realtime"], "bad realtime URL"),
        (["--wav", str(not_wav)], "unreadable WAV"),
        (["--wav", str(speech), "--barge-in-after-ms", "-5"], "--barge-in-after-ms must be >= 0"),
    ]
    for args, message in cases:
        assert main(["client", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err


def test_a_server_that_never_says_hello_times_out():
    async def silent(ws):
        await ws.wait_closed()

    async def scenario():
        async with websockets.serve(silent, "127.0.0.1", 0) as server:
            url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
            with pytest.raises(RealtimeError, match="no session.created"):
                async with RealtimeClient(url, open_timeout_s=0.3):
                    pass

    asyncio.run(scenario())


def write_wav(path, pcm: np.ndarray):
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(24000)
        wav.writeframes(pcm.tobytes())
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
