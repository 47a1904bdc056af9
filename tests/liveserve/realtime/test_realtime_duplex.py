"""Full-duplex sessions over /v1/realtime: every frame of streamed speech is answered."""

from __future__ import annotations

import asyncio

from tests.liveserve.realtime.realtime_harness import Client, connect, fixture_pcm16

DUPLEX_ON = {"liveserve": {"duplex": True}}


def run(coro):
    return asyncio.run(coro)


def test_streamed_speech_gets_one_frame_event_per_frame_period(server):
    speech = fixture_pcm16("q_capital_espeak_24k.wav")[: 24 * 1600]  # 1.6 s: 20 frames of 80 ms

    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.send("session.update", session=DUPLEX_ON)
            updated = await client.next("session.updated")
            assert updated["session"]["audio"]["input"]["turn_detection"] is None
            await client.append(speech, realtime=True, chunk_ms=40)
            frames = [await client.next("liveserve.duplex.frame", timeout=20) for _ in range(20)]
            assert [f["frame_index"] for f in frames] == list(range(20))
            assert all(0 < f["latency_ms"] < 10_000 and len(f["token_ids"]) == 1 for f in frames)
            await client.send("response.create")
            error = (await client.next("error"))["error"]
            assert error["code"] == "invalid_request"
            await client.send("session.update", session={"liveserve": {"duplex": False}})
            await client.next("session.updated")
            await client.ask("Say hi.", max_output_tokens=3)  # back to turns: the session still answers
            assert (await client.next("response.done"))["response"]["status"] in ("completed", "incomplete")

    run(scenario())


def test_duplex_cannot_start_while_a_response_is_in_progress(server):
    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask("Tell me a long story.", max_output_tokens=200)
            await client.next("response.created")
            await client.send("session.update", session=DUPLEX_ON)
            error = (await client.next("error"))["error"]
            await client.send("response.cancel")
            await client.next("response.done")
            return error

    error = run(scenario())
    assert error["code"] == "conversation_already_has_active_response"
    assert error["param"] == "session.liveserve.duplex"
