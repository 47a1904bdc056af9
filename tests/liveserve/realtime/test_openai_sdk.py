"""The official openai SDK's realtime client, pointed at LiveServe, completes a turn."""

from __future__ import annotations

import asyncio
import json

import pytest

openai = pytest.importorskip("openai")


def test_openai_sdk_realtime_turn(server):
    async def scenario():
        client = openai.AsyncOpenAI(api_key="unused", base_url=f"http://127.0.0.1:{server.port}/v1",
                                    websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
        types, audio_bytes = [], 0
        async with client.realtime.connect(model="tiny-omni") as conn:
            await conn.session.update(session={"type": "realtime", "output_modalities": ["audio"],
                                               "max_output_tokens": 6})
            await conn.conversation.item.create(item={
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]})
            await conn.response.create()
            async for event in conn:
                types.append(event.type)
                if event.type == "response.output_audio.delta":
                    audio_bytes += len(event.delta)
                if event.type in ("response.done", "error"):
                    return types, audio_bytes, event

    types, audio_bytes, last = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert last.type == "response.done", last
    assert last.response.status in ("completed", "incomplete")
    assert "session.created" in types and "session.updated" in types and audio_bytes > 0


ORDER = {"type": "function", "name": "order_status", "description": "Where an order is.",  # bounded: random
         "parameters": {"type": "object", "properties": {"order_id": {"type": "integer", "minimum": 0,  # weights
                                                                      "maximum": 999},  # may write digits forever
                                                         "carrier": {"type": "string", "enum": ["dhl", "ups"]}},
                        "required": ["order_id", "carrier"], "additionalProperties": False}}


def test_a_required_tool_call_through_the_sdk_then_its_result_answered_by_voice(server):
    """tiny-omni's random weights make the call the grammar allows (valid for the schema: the
    sampler masks the rest), never spoken; after its output the reply is spoken."""
    async def until_done(conn) -> tuple[list[str], object]:
        types = []
        async for event in conn:
            types.append(event.type)
            if event.type in ("response.done", "error"):
                return types, event

    async def scenario():
        client = openai.AsyncOpenAI(api_key="unused", base_url=f"http://127.0.0.1:{server.port}/v1",
                                    websocket_base_url=f"ws://127.0.0.1:{server.port}/v1")
        async with client.realtime.connect(model="tiny-omni") as conn:
            await conn.session.update(session={"type": "realtime", "output_modalities": ["audio"],
                                               "max_output_tokens": 200, "tools": [ORDER],
                                               "tool_choice": "required"})
            await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Where is order 42?"}]})
            await conn.response.create()
            call = await until_done(conn)
            item = call[1].response.output[0]
            await conn.conversation.item.create(item={"type": "function_call_output", "call_id": item.call_id,
                                                      "output": "It left the depot."})
            await conn.response.create(response={"max_output_tokens": 8})
            return call, await until_done(conn)

    (call_types, call), (reply_types, reply) = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert call.type == "response.done" and call.response.status == "completed", call
    item = call.response.output[0]
    assert item.type == "function_call" and item.name == "order_status"
    arguments = json.loads(item.arguments)
    assert set(arguments) == {"order_id", "carrier"} and 0 <= arguments["order_id"] <= 999
    assert arguments["carrier"] in ("dhl", "ups")
    assert "response.function_call_arguments.done" in call_types
    assert not [t for t in call_types if t.startswith("response.output_audio")]
    assert reply.type == "response.done" and reply.response.status in ("completed", "incomplete"), reply
    assert reply.response.output[0].type == "message" and "response.output_audio.delta" in reply_types
