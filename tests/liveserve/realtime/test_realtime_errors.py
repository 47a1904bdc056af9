"""Every client mistake gets an OpenAI-shaped error event and the session goes on."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest
import websockets

from tests.liveserve.realtime.realtime_harness import Client, ServerProcess, connect, refused, small_config


def run(coro):
    return asyncio.run(coro)


BAD_EVENTS = [
    ("not json at all", "invalid_json", None),
    (json.dumps([1, 2]), "invalid_json", None),
    (json.dumps({"no": "type"}), "missing_required_parameter", "type"),
    (json.dumps({"type": "session.fly"}), "unknown_event", "type"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "@@not base64@@"}), "invalid_base64", "audio"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(b"abc").decode()}), "invalid_audio", "audio"),
    (json.dumps({"type": "input_audio_buffer.append", "audio": "A" * (21 * 1024 * 1024)}), "audio_too_large", "audio"),
    (json.dumps({"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcmu"}}}}}),
     "unsupported_format", "session.audio.input.format"),
    (json.dumps({"type": "session.update", "session": {"audio": {"output": {"format": {"type": "audio/pcm", "rate": 16000}}}}}),
     "unsupported_format", "session.audio.output.format"),
    (json.dumps({"type": "session.update", "session": {"output_modalities": ["video"]}}), "invalid_value", "session.output_modalities"),
    (json.dumps({"type": "session.update", "session": {"audio": {"input": {"turn_detection": {"type": "server_vad", "threshold": 2}}}}}),
     "invalid_value", "session.audio.input.turn_detection.threshold"),
    (json.dumps({"type": "session.update", "session": {"temperature": "hot"}}), "invalid_value", "session.temperature"),
    (json.dumps({"type": "session.update", "session": {"liveserve": {"duplex": "yes"}}}), "invalid_type",
     "session.liveserve.duplex"),
    (json.dumps({"type": "session.update", "session": {"liveserve": 3}}), "invalid_type", "session.liveserve"),
    (json.dumps({"type": "input_audio_buffer.commit"}), "input_audio_buffer_commit_empty", None),
    (json.dumps({"type": "conversation.item.truncate", "item_id": "nope", "audio_end_ms": 10}), "item_not_found", "item_id"),
    (json.dumps({"type": "conversation.item.delete", "item_id": "nope"}), "item_not_found", "item_id"),
    (json.dumps({"type": "conversation.item.create", "item": {"type": "message", "role": "assistant", "content": []}}),
     "unsupported_item", "item.role"),
    (json.dumps({"type": "conversation.item.create", "item": {"role": "user", "content": [{"type": "image"}]}}),
     "invalid_value", "item.content[0].type"),
    (json.dumps({"type": "response.cancel"}), "response_cancel_not_active", None),
    (json.dumps({"type": "playback.ack", "played_ms": -5}), "invalid_value", "played_ms"),
    (json.dumps({"type": "response.create", "response": {"liveserve": {"ignore_eos": "yes"}}}), "invalid_type",
     "response.liveserve.ignore_eos"),
    (json.dumps({"type": "response.create", "response": {"instructions": "Be terse."}}), "unsupported_parameter",
     "response.instructions"),
]


def test_each_mistake_gets_an_error_and_the_session_goes_on(server):
    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            errors = []
            for raw, _, _ in BAD_EVENTS:
                await ws.send(raw)
                errors.append(await client.next("error"))
            await ws.send(b"\x00binary")
            errors.append(await client.next("error"))
            # After all that, a normal turn still works on the same connection.
            await client.ask("Still there?", max_output_tokens=4)
            return errors, await client.next("response.done")

    errors, done = run(scenario())
    for (raw, code, param), event in zip(BAD_EVENTS, errors):
        assert event["error"]["code"] == code, (raw[:60], event)
        assert event["error"]["param"] == param, (raw[:60], event)
        assert event["error"]["type"] == "invalid_request_error" and event["error"]["message"]
    assert errors[-1]["error"]["code"] == "invalid_message"
    assert done["response"]["status"] in ("completed", "incomplete")


def test_response_create_while_active_is_refused(server):
    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask("Talk.", max_output_tokens=200, liveserve={"ignore_eos": True})
            await client.next("response.created")
            await client.send("response.create", event_id="evt_second")
            error = await client.next("error")
            await client.send("response.cancel")
            return error, await client.next("response.done")

    error, done = run(scenario())
    assert error["error"]["code"] == "conversation_already_has_active_response"
    assert error["error"]["event_id"] == "evt_second"
    assert done["response"]["status"] == "cancelled"


def test_sessions_beyond_capacity_are_rejected_cleanly(tmp_path):
    process = ServerProcess(small_config(tmp_path, max_sessions=2))

    async def scenario():
        async with connect(process) as first, connect(process) as second:
            await first.recv(), await second.recv()
            return await refused(process)

    try:
        rejection, code = run(scenario())
        assert rejection["type"] == "error" and rejection["error"]["code"] == "session_capacity_exceeded"
        assert code == 1013
        assert process.metric("liveserve_rejected_sessions_total") == 1
    finally:
        process.stop()


def test_idle_sessions_are_closed(tmp_path):
    process = ServerProcess(small_config(tmp_path, idle_timeout_s=1.0))

    async def scenario():
        async with connect(process) as ws:
            client = Client(ws)
            await client.next("session.created")
            error = await client.next("error", timeout=10)
            with pytest.raises(websockets.ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 5)
            return error

    try:
        assert run(scenario())["error"]["code"] == "idle_timeout"
    finally:
        process.stop()
