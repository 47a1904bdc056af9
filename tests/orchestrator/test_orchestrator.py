"""Turns end to end on real engine threads with a tiny model (over 300 lines: the turn's whole life,
from context edits to cancellation, on one real pipeline fixture)."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

from orchestrator.datapath.stage_graph import Edge, StageGraph
from orchestrator.orchestrator import Orchestrator
from orchestrator.session.events import AudioDelta, TextDelta, TurnDone, TurnRequest, UnheardWork
from stages.kinds import StageKind


async def drain(turn) -> tuple[list, TurnDone]:
    events = []
    while True:
        event = await asyncio.wait_for(turn.events.get(), timeout=30)
        if isinstance(event, TurnDone):
            return events, event
        events.append(event)


async def until_first_audio(turn) -> None:
    while not isinstance(await asyncio.wait_for(turn.events.get(), timeout=30), AudioDelta):
        pass


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
            orch.sessions["s"].add_user_item("u0", speech_16k)  # not awaited: the turn must still come after it
            events, done = await drain(orch.sessions["s"].start_turn(TurnRequest()))
        finally:
            await orch.stop()
        return events, done

    events, done = run(scenario())
    audio = [e for e in events if isinstance(e, AudioDelta)]
    # 12 text tokens at most, 2 codec frames per spoken token, 1920 samples per frame.
    assert done.status in ("completed", "incomplete") and done.error is None
    # The reply saw the whole user item: its audio rows plus the chat markup.
    assert done.usage.input_tokens > -(-len(speech_16k) // 1280)
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
            thinker = orch.bus.stages["thinker"]
            first_prompt = await orch.sessions["s"].add_user_item("u0", text="Hello there, how are you?")
            _, first = await drain(orch.sessions["s"].start_turn(TurnRequest(speak=False)))
            await orch.wait_idle()
            after_first = thinker.stats.num_tokens
            second_prompt = await orch.sessions["s"].add_user_item("u1", text="And tomorrow?")
            _, second = await drain(orch.sessions["s"].start_turn(TurnRequest(speak=False)))
            await orch.wait_idle()
            prefix = len(orch.pipeline.template.assistant_prefix(False, False))
            return first, second, thinker.stats.num_tokens - after_first, after_first, second_prompt + prefix, first_prompt
        finally:
            await orch.stop()

    first, second, computed_second, computed_first, new_tokens, first_prompt = run(scenario())
    # Turn 2 computes its user item, the assistant prefix and its generated tokens: nothing of turn 1.
    assert computed_second == new_tokens + second.usage.text_tokens
    assert computed_first == first.usage.input_tokens + first.usage.text_tokens  # system + turn 1, once
    assert second.usage.input_tokens == computed_first + new_tokens


def test_cancelled_turn_leaves_no_blocks_behind(pipeline, speech_16k):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            orch.open_session("s")
            orch.sessions["s"].add_user_item("u0", speech_16k)
            turn = orch.sessions["s"].start_turn(TurnRequest(max_tokens=200, ignore_eos=True))
            await until_first_audio(turn)
            assert orch.sessions["s"].cancel_turn()
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
    assert done.usage.unheard is None  # cancelled with no playback point: nothing to measure against
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
                orch.sessions[f"s{i}"].add_user_item("u0", speech_16k[: 16000 * (i + 1)])
                turns.append(orch.sessions[f"s{i}"].start_turn(TurnRequest()))
            results = await asyncio.gather(*(drain(t) for t in turns))
            for i in range(4):
                orch.close_session(f"s{i}")
            await orch.wait_idle()
            return results, blocks_held(orch)
        finally:
            await orch.stop()

    results, blocks = run(scenario())
    assert all(done.status in ("completed", "incomplete") for _, done in results)
    assert all(done.usage.audio_samples == done.usage.codec_frames * 1920 > 0 for _, done in results)
    assert sum(blocks.values()) == 0


def test_session_errors_are_clear(pipeline):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            orch.open_session("s")
            with pytest.raises(ValueError, match="already open"):
                orch.open_session("s")
            orch.sessions["s"].add_user_item("u0", text="hi")
            turn = orch.sessions["s"].start_turn(TurnRequest(max_tokens=50, ignore_eos=True))
            with pytest.raises(ValueError, match="already has an active turn"):
                orch.sessions["s"].start_turn(TurnRequest())
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
            with pytest.raises(ValueError, match="maximum is 2048"):
                await orch.sessions["s"].add_user_item("u0", text="word " * 3000)
            await orch.sessions["s"].add_user_item("u1", text="short")
            _, fine = await drain(orch.sessions["s"].start_turn(TurnRequest(speak=False)))
            return fine
        finally:
            await orch.stop()

    fine = run(scenario())
    assert fine.status in ("completed", "incomplete")


def thinker_context(orch, session_id: str) -> list[int]:
    """The resident thinker request's tokens (read after the engines are idle)."""
    engine = orch.bus.stages["thinker"]
    return list(engine.scheduler.requests[orch.sessions[session_id].context.thinker_id].token_ids)


def test_barge_in_keeps_only_what_was_heard(pipeline):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            orch.open_session("s")
            await orch.sessions["s"].add_user_item("u0", text="Tell me a long story.")
            turn = orch.sessions["s"].start_turn(TurnRequest(max_tokens=60, ignore_eos=True))
            while len(turn.segment.spoken if turn.segment else []) < 8 or turn.usage.codec_frames < 4:
                await asyncio.sleep(0.005)
            prefix = len(turn.segment.token_ids) - turn.usage.text_tokens
            # The user heard 3 frames (240 ms): 2 frames per token -> the 2nd spoken token had started.
            orch.sessions["s"].cancel_turn(heard_ms=240.0)
            _, done = await drain(turn)
            await orch.wait_idle()
            return done, turn.segment, prefix, orch.sessions["s"].context.num_tokens, thinker_context(orch, "s")
        finally:
            await orch.stop()

    done, segment, prefix, num_tokens, context = run(scenario())
    assert done.status == "cancelled"
    # The assistant segment keeps its prefix and the two heard tokens, nothing after them.
    assert len(segment.spoken) == 2 and len(segment.token_ids) == segment.spoken[-1] + 1
    assert len(context) == num_tokens and context[-len(segment.token_ids):] == segment.token_ids
    # The waste: every text token the cut dropped, every codec/vocoded frame after the 3 that had started.
    usage, unheard = done.usage, done.usage.unheard
    assert unheard.heard_ms == 240.0
    assert unheard.text_tokens == usage.text_tokens - (len(segment.token_ids) - prefix) >= 6
    assert unheard.codec_frames == usage.codec_frames - 3 >= 1
    assert unheard.vocoder_frames == max(0, usage.vocoder_frames - 3)
    assert usage.vocoder_frames * 1920 == usage.audio_samples


def test_unheard_work_of_a_finished_reply_survives_later_cuts(pipeline):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            orch.open_session("s")
            await orch.sessions["s"].add_user_item("u0", text="Hello there.")
            turn = orch.sessions["s"].start_turn(TurnRequest(max_tokens=6, ignore_eos=True))
            _, done = await drain(turn)
            prefix, first_spoken = len(turn.segment.token_ids) - 6, turn.segment.spoken[0]
            before_cut = turn.unheard(80.0)
            orch.sessions["s"].context.truncate_heard(turn.item_id, 80.0)  # the client heard 80 ms after the reply ended
            kept = len(turn.segment.token_ids) - prefix
            return done, turn, first_spoken - prefix, before_cut, kept
        finally:
            await orch.stop()

    done, turn, first_spoken, before_cut, kept = run(scenario())
    usage = done.usage
    assert done.status == "incomplete" and usage.unheard is None  # nothing was cut while it ran
    assert usage.text_tokens == 6 and usage.vocoder_frames == usage.codec_frames > 0
    assert turn.unheard(0.0) == UnheardWork(0.0, 6 - first_spoken, usage.codec_frames, usage.vocoder_frames)
    # 80 ms: one frame had started; the context cut and the figure agree, before and after the cut.
    assert turn.unheard(80.0) == before_cut == UnheardWork(80.0, 6 - kept, usage.codec_frames - 1, usage.vocoder_frames - 1)
    assert turn.unheard(60_000.0) == UnheardWork(60_000.0, 0, 0, 0)


def test_deleting_an_earlier_item_rebuilds_the_context(pipeline):
    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            orch.open_session("s", instructions="Be brief.")
            await orch.sessions["s"].add_user_item("u0", text="First question.")
            await drain(orch.sessions["s"].start_turn(TurnRequest(speak=False), item_id="a0"))
            await orch.sessions["s"].add_user_item("u1", text="Second question.")
            await orch.wait_idle()
            kept = [seg.token_ids for seg in orch.sessions["s"].context.segments if seg.item_id != "u0"]
            assert orch.sessions["s"].context.delete("u0")
            await orch.wait_idle()
            context = thinker_context(orch, "s")
            _, done = await drain(orch.sessions["s"].start_turn(TurnRequest(speak=False)))
            return kept, context, done, blocks_held(orch)["thinker"]
        finally:
            await orch.stop()

    kept, context, done, thinker_blocks = run(scenario())
    assert context == [t for ids in kept for t in ids]
    assert done.status in ("completed", "incomplete") and thinker_blocks > 0


def test_a_pause_in_the_users_speech_reaches_the_thinker(pipeline):
    from stages.commands import TurnEndingHint

    async def scenario():
        orch = Orchestrator(pipeline)
        await orch.start()
        try:
            sent = []
            thinker = orch.bus.stages["thinker"]
            forward = thinker.submit
            thinker.submit = lambda command: (sent.append(command), forward(command))
            orch.open_session("s")
            orch.sessions["s"].speech_paused(0.25)
            return sent, orch.sessions["s"].context.thinker_id
        finally:
            await orch.stop()

    sent, thinker_id = run(scenario())
    assert [c for c in sent if isinstance(c, TurnEndingHint)] == [TurnEndingHint(thinker_id, 0.25)]


def test_a_pipeline_that_hears_and_writes_answers_speech_in_text(pipeline, speech_16k):
    hears_and_writes = dataclasses.replace(pipeline, talker=None, vocoder=None, talker_sampling=None,
                                           graph=StageGraph((Edge(StageKind.ENCODER, StageKind.THINKER),)))

    async def scenario():
        orch = Orchestrator(hears_and_writes)
        await orch.start()
        try:
            session = orch.open_session("s")
            session.add_user_item("u0", speech_16k)
            events, done = await drain(session.start_turn(TurnRequest(max_tokens=5, ignore_eos=True)))
            return events, done, sorted(orch.bus.stages)
        finally:
            await orch.stop()

    events, done, stages = run(scenario())
    assert stages == ["encoder", "thinker"]  # only the graph's stages run
    assert done.status == "incomplete" and done.usage.text_tokens == 5  # asked to speak, it writes
    assert not [e for e in events if isinstance(e, AudioDelta)] and done.usage.codec_frames == 0


def test_a_text_only_pipeline_refuses_audio_and_answers_text(pipeline, speech_16k):
    text_only = dataclasses.replace(pipeline, encoder=None, talker=None, vocoder=None, talker_sampling=None,
                                    graph=StageGraph(()))

    async def scenario():
        orch = Orchestrator(text_only)
        await orch.start()
        try:
            session = orch.open_session("s")
            with pytest.raises(ValueError, match="takes no audio"):
                await session.add_user_item("u0", speech_16k)
            await session.add_user_item("u1", text="Hello?")
            return await drain(session.start_turn(TurnRequest(max_tokens=4, ignore_eos=True)))
        finally:
            await orch.stop()

    events, done = run(scenario())
    assert done.status == "incomplete" and [e for e in events if isinstance(e, TextDelta)]
