"""Waste accounting on a real server: unheard work in response.done and conversation.item.truncated, and on /metrics.

The served config speaks 3 codec frames per text token, 80 ms (3840 PCM16 bytes) per frame.
"""

from __future__ import annotations

import asyncio
import base64

from tests.liveserve.realtime.realtime_harness import Client, connect

FRAME_BYTES = 2 * 1920


def run(coro):
    return asyncio.run(coro)


def delivered_frames(client: Client) -> int:
    return sum(len(base64.b64decode(e["delta"])) for e in client.received("response.output_audio.delta")) // FRAME_BYTES


def test_a_reply_cut_while_generating_reports_its_unheard_work(server):
    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask("Tell me a story.", max_output_tokens=400, liveserve={"ignore_eos": True})
            delta = await client.next("response.output_audio.delta")  # the first chunk: 4 frames, 320 ms
            await client.send("conversation.item.truncate", item_id=delta["item_id"], content_index=0, audio_end_ms=80)
            truncated = await client.next("conversation.item.truncated")
            done = await client.next("response.done")
            return client, truncated, done

    client, truncated, done = run(scenario())
    usage = done["response"]["usage"]
    unheard, generated = usage["liveserve"], usage["output_token_details"]
    assert done["response"]["status"] == "cancelled"
    assert truncated["liveserve"] == unheard  # one cut, one figure in both events
    # 80 ms heard: frame 0 had started, so only it and its text token were heard.
    assert unheard["heard_ms"] == 80.0
    assert unheard["unheard_audio_tokens"] == generated["audio_tokens"] - 1 > 0
    assert 0 < unheard["unheard_text_tokens"] <= generated["text_tokens"] - 1
    # Vocoded audio: at least what reached the client, at most one frame per codec frame.
    assert delivered_frames(client) - 1 <= unheard["unheard_vocoder_frames"] <= generated["audio_tokens"] - 1


def test_truncating_after_the_reply_reports_the_latest_figure_and_counts_it_once(server):
    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask("Hello", max_output_tokens=12, liveserve={"ignore_eos": True})
            done = await client.next("response.done")
            item_id = done["response"]["output"][0]["id"]
            figures = []
            for end_ms in (400, 800, 0):  # the client keeps playing buffered audio, then corrects itself
                await client.send("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=end_ms)
                figures.append((await client.next("conversation.item.truncated"))["liveserve"])
            return client, done, figures

    counters = [(name, stage) for name in ("liveserve_unheard_units_total", "liveserve_generated_units_total")
                for stage in ("thinker", "talker", "vocoder")]
    before = {key: server.metric(key[0], stage=key[1]) for key in counters}
    client, done, (at_400, at_800, at_0) = run(scenario())
    grew = {key: server.metric(key[0], stage=key[1]) - before[key] for key in counters}
    usage = done["response"]["usage"]
    codec, frames = usage["output_token_details"]["audio_tokens"], delivered_frames(client)
    assert "liveserve" not in usage  # it completed uncut
    assert codec == frames >= 11  # every frame was vocoded and delivered; 800 ms is within the audio
    # 400 ms: frames 0-4 had started (2 text tokens heard); 800 ms: frames 0-9; 0 ms: none.
    assert at_400["heard_ms"] == 400.0 and 0 < at_400["unheard_text_tokens"] <= 12 - 2
    assert (at_400["unheard_audio_tokens"], at_400["unheard_vocoder_frames"]) == (codec - 5, frames - 5)
    assert (at_800["unheard_audio_tokens"], at_800["unheard_vocoder_frames"]) == (codec - 10, frames - 10)
    assert (at_0["unheard_audio_tokens"], at_0["unheard_vocoder_frames"]) == (codec, frames)
    assert 12 >= at_0["unheard_text_tokens"] >= at_400["unheard_text_tokens"] >= at_800["unheard_text_tokens"]
    # The counters hold the item's largest figure: the smaller one at 800 ms added nothing.
    assert grew["liveserve_unheard_units_total", "talker"] == codec
    assert grew["liveserve_unheard_units_total", "vocoder"] == frames
    assert grew["liveserve_unheard_units_total", "thinker"] == at_0["unheard_text_tokens"]
    assert grew["liveserve_generated_units_total", "talker"] >= codec
    assert grew["liveserve_generated_units_total", "vocoder"] >= frames
    assert grew["liveserve_generated_units_total", "thinker"] >= 12
