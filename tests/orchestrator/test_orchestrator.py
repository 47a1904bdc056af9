"""Turns end to end on real engine threads with a tiny model."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from orchestrator.events import AudioDelta, TextDelta, TurnDone
from orchestrator.orchestrator import Orchestrator
from orchestrator.turn import TurnRequest

async def drain(turn) -> tuple[list, TurnDone]:
    events = []
    while True:
        event = await asyncio.wait_for(turn.events.get(), timeout=30)
        if isinstance(event, TurnDone):
            return events, event
        events.append(event)


def blocks_held(orch: Orchestrator) -> dict[str, int]:
    return {s.name: s.kv_blocks_used for s in orch.status()}


def requests_held(orch: Orchestrator) -> dict[str, int]:
    return {s.name: s.num_requests for s in orch.status()}


def run(coro):
    return asyncio.run(coro)


def test_spoken_turn_produces_text_and_audio(pipeline, speech_16k):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            orch.open_session("s")
            events, done = await drain(orch.start_turn("s", TurnRequest(audio=speech_16k)))
        finally:
            await orch.stop()
        return events, done

    events, done = run(scenario())
    audio = [e for e in events if isinstance(e, AudioDelta)]
    # 12 text tokens at most, 2 codec frames per spoken token, 1920 samples per frame.
    assert done.status in ("completed", "incomplete") and done.error is None
    assert done.usage.audio_input_frames == int(np.ceil(len(speech_16k) / 1280))
    assert done.usage.codec_frames > 0
    assert sum(len(a.pcm) for a in audio) == done.usage.codec_frames * 1920 == done.usage.audio_samples
    assert all(a.sample_rate == 24000 and np.abs(a.pcm).max() <= 1.0 for a in audio)
    # First chunk is the small one (4 frames), later ones up to 8.
    assert len(audio[0].pcm) == 4 * 1920
    assert any(isinstance(e, TextDelta) for e in events) or done.usage.text_tokens == 1


def test_second_turn_prefills_only_new_tokens(pipeline):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            orch.open_session("s", instructions="You are brief.")
            thinker = orch.stages["thinker"]
            _, first = await drain(orch.start_turn("s", TurnRequest(text="Hello there, how are you?", speak=False)))
            await orch.wait_idle()
            after_first = thinker.stats.num_tokens
            _, second = await drain(orch.start_turn("s", TurnRequest(text="And tomorrow?", speak=False)))
            await orch.wait_idle()
            return first, second, thinker.stats.num_tokens - after_first, after_first
        finally:
            await orch.stop()

    first, second, computed_second, computed_first = run(scenario())
    # Turn 2 computes its own prompt and its generated tokens, nothing of turn 1's context.
    assert computed_second == second.usage.input_tokens + second.usage.text_tokens
    assert computed_first > first.usage.input_tokens  # system prompt + turn 1 were computed once


def test_cancelled_turn_leaves_no_blocks_behind(pipeline, speech_16k):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            orch.open_session("s")
            turn = orch.start_turn("s", TurnRequest(audio=speech_16k, max_tokens=200, ignore_eos=True))
            while not isinstance(await asyncio.wait_for(turn.events.get(), 30), AudioDelta):
                pass
            assert orch.cancel_turn("s")
            _, done = await drain(turn)
            await orch.wait_idle()
            during = blocks_held(orch), requests_held(orch)
            orch.close_session("s")
            await orch.wait_idle()
            return done, during, (blocks_held(orch), requests_held(orch))
        finally:
            await orch.stop()

    done, (blocks, requests), (blocks_after_close, requests_after_close) = run(scenario())
    assert done.status == "cancelled"
    # Only the session's resident thinker context remains after the cancel ...
    assert blocks["talker"] == 0 and requests == {"encoder": 0, "thinker": 1, "talker": 0, "vocoder": 0}
    assert blocks["thinker"] > 0
    # ... and closing the session frees that too.
    assert blocks_after_close == {"encoder": 0, "thinker": 0, "talker": 0, "vocoder": 0}
    assert sum(requests_after_close.values()) == 0


def test_four_concurrent_sessions_complete(pipeline, speech_16k):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            turns = []
            for i in range(4):
                orch.open_session(f"s{i}")
                turns.append(orch.start_turn(f"s{i}", TurnRequest(audio=speech_16k[: 16000 * (i + 1)])))
            results = await asyncio.gather(*(drain(t) for t in turns))
            for i in range(4):
                orch.close_session(f"s{i}")
            await orch.wait_idle()
            return results, blocks_held(orch)
        finally:
            await orch.stop()

    results, blocks = run(scenario())
    lengths = [min(len(speech_16k), 16000 * (i + 1)) for i in range(4)]
    assert all(done.status in ("completed", "incomplete") for _, done in results)
    assert all(done.usage.audio_samples == done.usage.codec_frames * 1920 > 0 for _, done in results)
    assert [done.usage.audio_input_frames for _, done in results] == [-(-n // 1280) for n in lengths]
    assert sum(blocks.values()) == 0


def test_session_errors_are_clear(pipeline):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            with pytest.raises(KeyError, match="no open session"):
                orch.start_turn("missing", TurnRequest(text="hi"))
            orch.open_session("s")
            with pytest.raises(ValueError, match="already open"):
                orch.open_session("s")
            turn = orch.start_turn("s", TurnRequest(text="hi", max_tokens=50, ignore_eos=True))
            with pytest.raises(ValueError, match="already has an active turn"):
                orch.start_turn("s", TurnRequest(text="again"))
            turn.cancel()
        finally:
            await orch.stop()

    run(scenario())


def test_context_overflow_fails_the_turn_not_the_session(pipeline):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            orch.open_session("s")
            _, too_long = await drain(orch.start_turn("s", TurnRequest(text="word " * 3000, speak=False)))
            _, fine = await drain(orch.start_turn("s", TurnRequest(text="short", speak=False)))
            return too_long, fine
        finally:
            await orch.stop()

    too_long, fine = run(scenario())
    assert too_long.status == "failed" and "maximum is 2048" in too_long.error
    assert fine.status in ("completed", "incomplete")
