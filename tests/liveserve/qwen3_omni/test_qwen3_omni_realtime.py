"""A Realtime API session on a Qwen3-Omni folder, through the openai SDK: a spoken turn, a barge-in (the reply
cancelled and cut to what was heard), and a second turn after it."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest

from lab.qwen3_omni.tiny_folder import SHAPES, write_tiny_folder
from lab.server_process import ServerProcess
from liveserve.config.document import override_argument

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def qwen3_server(tmp_path_factory):
    folder = write_tiny_folder(tmp_path_factory.mktemp("qwen3-omni"), SHAPES["tiny-a"], 0)
    sets = [f"model.folder={folder}", "stages.thinker.sampling.max_tokens=24",
            "stages.talker.sampling.max_tokens=64"]
    with ServerProcess("qwen3-omni-tiny-cpu", [override_argument(s) for s in sets]) as server:
        yield server


async def events_until_done(conn, on_audio=None) -> tuple[list[str], object]:
    types = []
    async for event in conn:
        types.append(event.type)
        if event.type == "response.output_audio.delta" and on_audio is not None:
            await on_audio(event)
        if event.type in ("response.done", "error"):
            return types, event


def test_spoken_turn_barge_in_and_second_turn(qwen3_server, speech_16k):
    speech_24k = np.interp(np.arange(0, len(speech_16k), 2 / 3), np.arange(len(speech_16k)), speech_16k)
    pcm16 = (np.clip(speech_24k, -1, 1) * 32767).astype("<i2").tobytes()

    async def scenario():
        client = openai.AsyncOpenAI(api_key="unused", base_url=f"http://127.0.0.1:{qwen3_server.port}/v1",
                                    websocket_base_url=f"ws://127.0.0.1:{qwen3_server.port}/v1")
        async with client.realtime.connect(model="qwen3-omni") as conn:
            await conn.session.update(session={"type": "realtime", "output_modalities": ["audio"],
                                               "audio": {"input": {"turn_detection": None}}})
            await conn.input_audio_buffer.append(audio=base64.b64encode(pcm16).decode())
            await conn.input_audio_buffer.commit()
            await conn.response.create()
            spoken = await events_until_done(conn)

            await conn.conversation.item.create(item={
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell me a story."}]})
            await conn.response.create()
            cut = []

            async def barge_in(event):
                if not cut:
                    cut.append(event.item_id)
                    await conn.response.cancel()
                    await conn.conversation.item.truncate(item_id=event.item_id, content_index=0, audio_end_ms=0)
            barged = await events_until_done(conn, barge_in)

            await conn.conversation.item.create(item={
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go on."}]})
            await conn.response.create()
            second = await events_until_done(conn)
            return spoken, barged, second

    spoken, barged, second = asyncio.run(asyncio.wait_for(scenario(), 240))
    for types, last in (spoken, second):
        assert last.type == "response.done", last
        assert last.response.status in ("completed", "incomplete")
        assert "response.output_audio.delta" in types
    assert barged[1].type == "response.done" and barged[1].response.status == "cancelled"


def test_a_full_duplex_stream_is_refused_with_an_error_naming_why(qwen3_server):
    async def scenario():
        client = openai.AsyncOpenAI(api_key="unused", base_url=f"http://127.0.0.1:{qwen3_server.port}/v1",
                                    websocket_base_url=f"ws://127.0.0.1:{qwen3_server.port}/v1")
        async with client.realtime.connect(model="qwen3-omni") as conn:
            await conn.session.update(session={"type": "realtime", "liveserve": {"duplex": True}})
            async for event in conn:
                if event.type == "error":
                    await conn.conversation.item.create(item={
                        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]})
                    await conn.response.create(response={"output_modalities": ["text"]})
                    return event, await events_until_done(conn)

    error, (_, done) = asyncio.run(asyncio.wait_for(scenario(), 120))
    assert "takes whole utterances" in error.error.message
    assert done.type == "response.done" and done.response.status in ("completed", "incomplete")  # the session goes on
