"""The realtime API on a real server: spoken turns, manual and text turns, barge-in, truncation."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import time

import numpy as np
import pytest

from tests.liveserve.realtime.realtime_harness import Client, connect, fixture_pcm16, silence

LEAD_MS, TAIL_MS = 500, 1200


def speech_edges_ms(pcm16: np.ndarray) -> tuple[float, float]:
    """First and last 10 ms frame 10 dB over the noise floor (5th percentile) and within 45 dB of the peak."""
    frames = pcm16[: len(pcm16) // 240 * 240].astype(np.float64).reshape(-1, 240)
    level = 10 * np.log10((frames**2).mean(axis=1) + 1e-9)
    loud = np.flatnonzero(level > max(np.percentile(level, 5) + 10, level.max() - 45))
    return loud[0] * 10.0, (loud[-1] + 1) * 10.0


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("clip", ["q_capital_espeak_24k.wav", "q_tokyo_flite_24k.wav", "librivox_austen_0890_24k.wav"])
def test_spoken_turn_with_server_vad(server, clip):
    speech = fixture_pcm16(clip)
    start, end = speech_edges_ms(speech)

    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.send("session.update", session={"type": "realtime", "max_output_tokens": 8})
            await client.next("session.updated")
            await client.append(np.concatenate([silence(LEAD_MS), speech, silence(TAIL_MS)]))
            started = await client.next("input_audio_buffer.speech_started")
            stopped = await client.next("input_audio_buffer.speech_stopped")
            await client.next("input_audio_buffer.committed")
            done = await client.next("response.done")
            return client, started, stopped, done

    client, started, stopped, done = run(scenario())
    # Edges within ~100 ms of the truth (start is reported with 300 ms of prefix padding).
    assert abs(started["audio_start_ms"] + 300 - (LEAD_MS + start)) <= 100
    assert -100 <= stopped["audio_end_ms"] - (LEAD_MS + end) <= 160
    assert done["response"]["status"] in ("completed", "incomplete")
    audio = b"".join(base64.b64decode(e["delta"]) for e in client.received("response.output_audio.delta"))
    usage = done["response"]["usage"]
    assert len(audio) == 2 * 1920 * usage["output_token_details"]["audio_tokens"] > 0
    assert usage["input_tokens"] > (end - start) / 80  # the audio rows reached the thinker


def test_manual_commit_and_text_turns(server):
    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.send("session.update", session={"type": "realtime", "audio": {"input": {"turn_detection": None}}})
            updated = await client.next("session.updated")
            await client.append(fixture_pcm16("q_sky_espeak_24k.wav"), realtime=False)
            await client.send("input_audio_buffer.commit")
            committed = await client.next("input_audio_buffer.committed")
            await client.send("response.create", response={"max_output_tokens": 6})
            spoken = await client.next("response.done")
            await client.send("conversation.item.create", item={
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "And why at sunset?"}]})
            await client.next("conversation.item.added")
            await client.send("response.create", response={"output_modalities": ["text"], "max_output_tokens": 5})
            written = await client.next("response.done")
            return client, updated, committed, spoken, written

    client, updated, committed, spoken, written = run(scenario())
    assert updated["session"]["audio"]["input"]["turn_detection"] is None
    assert not client.received("input_audio_buffer.speech_started")
    assert spoken["response"]["usage"]["output_token_details"]["audio_tokens"] > 0
    assert written["response"]["status"] in ("completed", "incomplete")
    assert written["response"]["usage"]["output_token_details"]["audio_tokens"] == 0
    assert client.received("response.output_text.delta") or written["response"]["usage"]["output_tokens"] == 1
    # The second reply's context holds the first turn: more input tokens than the first.
    assert written["response"]["usage"]["input_tokens"] > spoken["response"]["usage"]["input_tokens"]


def test_barge_in_stops_audio_and_truncates(server):
    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask("Tell me a story.", max_output_tokens=400, liveserve={"ignore_eos": True})
            await client.next("response.output_audio.delta")
            await client.append(np.concatenate([fixture_pcm16("bargein_wait_espeak_24k.wav"), silence(300)]))
            started = await client.next("input_audio_buffer.speech_started")
            started_at = client.events[client._cursor - 1][0]
            done = await client.next("response.done", timeout=10)
            done_at = client.events[client._cursor - 1][0]
            truncated = client.received("conversation.item.truncated")
            return client, started, done, done_at - started_at, truncated

    client, started, done, latency, truncated = run(scenario())
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"]["reason"] == "turn_detected"
    assert latency < 1.0  # response.done follows speech start promptly
    item_id = done["response"]["output"][0]["id"]
    assert truncated and truncated[0]["item_id"] == item_id
    # The barge-in's truncation and response.done report the same unheard work, cut where playback was.
    unheard = done["response"]["usage"]["liveserve"]
    assert truncated[0]["liveserve"] == unheard and int(unheard["heard_ms"]) == truncated[0]["audio_end_ms"]
    assert 0 <= unheard["unheard_audio_tokens"] <= done["response"]["usage"]["output_token_details"]["audio_tokens"]
    # No audio delta of the cancelled response after its response.done.
    types = [e["type"] for _, e in client.events]
    last_delta = max(i for i, t in enumerate(types) if t == "response.output_audio.delta")
    assert last_delta < types.index("response.done")


def test_speech_over_a_reply_that_finished_generating_truncates_it_where_playback_was(server):
    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask("Tell me a story.", max_output_tokens=30, liveserve={"ignore_eos": True})
            done = await client.next("response.done")  # 7.2 s of audio, generated in well under that
            item_id = done["response"]["output"][0]["id"]
            await client.send("playback.ack", item_id=item_id, played_ms=1000)
            await client.append(np.concatenate([fixture_pcm16("bargein_wait_espeak_24k.wav"), silence(300)]))
            truncated = await client.next("conversation.item.truncated", timeout=10)
            return done, item_id, truncated

    done, item_id, truncated = run(scenario())
    assert done["response"]["status"] == "incomplete"
    codec = done["response"]["usage"]["output_token_details"]["audio_tokens"]
    assert truncated["item_id"] == item_id
    # Playback ran on from the 1000 ms ack until the VAD heard the user (well under 3 s of audio).
    assert 1000 <= truncated["audio_end_ms"] < 4000
    heard_frames = math.ceil(truncated["liveserve"]["heard_ms"] / 80)
    assert truncated["liveserve"]["unheard_audio_tokens"] == codec - heard_frames > 0


def test_truncate_after_the_reply(server):
    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask("Hello", max_output_tokens=10, liveserve={"ignore_eos": True})
            done = await client.next("response.done")
            item_id = done["response"]["output"][0]["id"]
            await client.send("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=400)
            truncated = await client.next("conversation.item.truncated")
            await client.send("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=10**7,
                              event_id="evt_past")
            error = await client.next("error")
            return truncated, error

    truncated, error = run(scenario())
    assert truncated["audio_end_ms"] == 400
    assert error["error"]["param"] == "audio_end_ms" and error["error"]["event_id"] == "evt_past"


def test_disconnect_mid_response_frees_everything(server):
    async def scenario():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask("Go on and on.", max_output_tokens=300, liveserve={"ignore_eos": True})
            await client.next("response.output_audio.delta")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            used = sum(server.metric("liveserve_kv_blocks_used", stage=s) for s in ("thinker", "talker"))
            if used == 0 and server.metric("liveserve_live_sessions") == 0:
                return used
            await asyncio.sleep(0.1)
        return used

    assert run(scenario()) == 0


def test_beta_clients_get_beta_names(server):
    async def scenario():
        async with connect(server, additional_headers={"OpenAI-Beta": "realtime=v1"}) as ws:
            client = Client(ws)
            created = await client.next("session.created")
            await client.send("conversation.item.create", item={
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]})
            await client.next("conversation.item.created")
            await client.send("response.create", response={"max_output_tokens": 3})
            await client.next("response.audio.delta")
            await client.next("response.done")
            return created, client

    created, client = run(scenario())
    assert created["session"]["input_audio_format"] == "pcm16" and "modalities" in created["session"]
    assert not client.received("response.output_audio.delta") and not client.received("conversation.item.added")


def test_twenty_concurrent_sessions(server):
    async def one(i: int) -> dict:
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask(f"Question {i}?", max_output_tokens=6)
            return await client.next("response.done", timeout=120)

    async def scenario():
        return await asyncio.gather(*(one(i) for i in range(20)))

    results = run(scenario())
    assert all(r["response"]["status"] in ("completed", "incomplete") for r in results)
    assert all(r["response"]["usage"]["output_token_details"]["audio_tokens"] > 0 for r in results)


def test_health_and_metrics(server):
    assert '"status":"ok"' in server.get("/health")
    text = server.get("/metrics")
    for name in ("liveserve_live_sessions", "liveserve_audio_ttfp_seconds_bucket", "liveserve_audio_rtf_bucket",
                 "liveserve_playback_underruns_total", "liveserve_stage_queue_depth", "liveserve_stage_batch_size",
                 "liveserve_kv_blocks_used", "liveserve_kv_blocks_free"):
        assert name in text, name
    assert server.metric("liveserve_audio_ttfp_seconds_count") >= 0


def test_step_counters_grow_with_a_reply(server):
    def counters(stage: str) -> tuple[float, ...]:
        return tuple(server.metric(f"liveserve_stage_{name}_total", stage=stage)
                     for name in ("steps", "step_tokens", "busy_seconds"))

    async def reply():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.ask("Count to three.", max_output_tokens=4)
            await client.next("response.done", timeout=120)

    def rounds() -> float:
        return server.metric("liveserve_scheduler_rounds_total", stage="thinker")

    before, rounds_before = {stage: counters(stage) for stage in ("thinker", "talker", "vocoder")}, rounds()
    run(reply())
    for stage, (steps, tokens, busy) in before.items():
        after_steps, after_tokens, after_busy = counters(stage)
        assert after_steps > steps and after_busy > busy, stage
        assert after_tokens - tokens >= after_steps - steps, stage  # every counted step ran at least one position
    # the lab's config (tiny-omni-cpu) serves LiveServe's policies: urgency orders the rounds, the thinker has a host tier
    assert rounds() > rounds_before
    assert server.metric("liveserve_kv_link_gbps", stage="thinker") > 0


def test_traces_line_up_each_response_with_the_steps_of_its_stages(server):
    async def reply():
        async with connect(server) as ws:
            client = Client(ws)
            await client.next("session.created")
            await client.send("session.update", session={"tracing": {"workflow_name": "trace-test"}})
            await client.next("session.updated")
            await client.ask("Count to three.", max_output_tokens=4)
            await client.next("response.done", timeout=120)

    run(reply())
    response = json.loads((server.trace_dir / "responses.jsonl").read_text().splitlines()[-1])
    assert response["tracing"] == {"workflow_name": "trace-test"}  # the client's tracing setting is kept with it
    steps = {stage: [json.loads(line) for line in (server.trace_dir / f"{stage}.jsonl").read_text().splitlines()]
             for stage in ("thinker", "talker", "vocoder")}

    def first(stage: str, key: str, request_id: str) -> float:
        """When `request_id` first got work (key "ready") or ran (key "run") after the turn ended."""
        return next(s["t"] for s in steps[stage]
                    if s["t"] >= response["turn_end"] and request_id in {r if key == "ready" else r[0] for r in s[key]})

    # the turn's path, in the order it must have happened: turn end, thinker, talker, vocoder, first audio
    # (the session's context may have computed before: its user item enters as soon as it is created)
    thinker, talker, vocoder = (response["requests"][kind] for kind in ("thinker", "talker", "vocoder"))
    path = [response["turn_end"], first("thinker", "run", thinker), first("talker", "ready", talker),
            first("talker", "run", talker), first("vocoder", "ready", vocoder), first("vocoder", "run", vocoder),
            response["first_audio"]]
    assert path == sorted(path) and response["status"] in ("completed", "incomplete")
    assert response["audio_ms"] > 0 and response["text_tokens"] > 0


def test_liveserve_client_against_the_server(server, tmp_path):
    import json
    import subprocess
    import sys

    from tests.liveserve.realtime.realtime_harness import FIXTURES

    out = tmp_path / "reply.wav"
    result = subprocess.run(
        [sys.executable, "-m", "liveserve.cli", "client", "--wav", str(FIXTURES / "q_spider_espeak_24k.wav"),
         "--url", server.url, "--out", str(out), "--max-output-tokens", "6", "--json"],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    turn = summary["turns"][0]
    assert summary["status"] in ("completed", "incomplete")
    assert turn["audio_ttfp_ms"] > 0 and turn["audio_s"] > 0 and out.stat().st_size > 44
