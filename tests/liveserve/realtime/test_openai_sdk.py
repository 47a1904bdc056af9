"""The official openai SDK's realtime client, pointed at LiveServe, completes a turn."""

from __future__ import annotations

import asyncio

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
