"""Replies begun at a pause in the user's speech (interaction.preemptive_reply), on scripted speech stages
and a fake clock: held back until the pause ends the turn, dropped unseen when it does not."""

from __future__ import annotations

import asyncio
import dataclasses

from orchestrator.config import InteractionConfig
from stages.commands import AbortRequest, AppendInput, StopGeneration, TurnEndingHint
from stages.plan import StageOutput
from stages.requests.asr import Transcript
from tests.liveserve.realtime.interaction_harness import InteractionHarness, harnessed_voice, voice_pipeline

WIDTH = 64  # the tiny thinker's hidden size
SAID = "What is the capital of France?"
DRAFT_SEEN = ("input_audio_buffer.committed", "conversation.item.added", "conversation.item.done", "response.created",
              "response.output_item.added", "response.output_audio_transcript.delta")


async def paused(h: InteractionHarness, text: str = SAID):
    """With input transcription on, the user speaks, then pauses; the ASR stage reads all the speech sent: a
    draft reply starts (its turn)."""
    await h.client("session.update", session={"type": "realtime", "audio": {"input": {
        "transcription": {"model": "whisper-1"}}}})
    await h.speak(600, then_silence_ms=300)
    asr_id, = h.stages.added("asr")
    sent = sum(len(c.data) for c in h.stages.sent("asr", AppendInput) if c.data is not None)
    h.stages.sink("asr", [StageOutput(asr_id, Transcript(text, False, sent))])
    await h.settle()
    return h.controller.session.active_turn


def test_a_reply_begun_at_the_pause_is_seen_only_when_the_pause_ends_the_turn_then_whole_and_in_order():
    async def scenario(h):
        tokens_before = h.controller.session.context.num_tokens
        draft = await paused(h)
        h.stages.think(h.thinker_id, draft.turn_id, [10, 11, 12], WIDTH)
        await h.settle()
        seen_while_paused = h.types()
        await h.speak(0, then_silence_ms=400)  # the pause ends the turn
        return h, draft, tokens_before, seen_while_paused

    h, draft, tokens_before, seen_while_paused = asyncio.run(harnessed_voice(scenario))
    assert draft is not None and h.controller.turn is draft  # the draft is the turn's reply
    assert (h.controller.num_drafts_taken, h.controller.num_drafts_dropped) == (1, 0)
    assert not set(DRAFT_SEEN) & set(seen_while_paused)
    types = h.types()
    order = [types.index(t) for t in ("input_audio_buffer.speech_stopped", "input_audio_buffer.committed",
                                      "response.created", "response.output_audio_transcript.delta")]
    assert order == sorted(order), types
    user_done = next(e for e in h.of_type("conversation.item.done") if e["item"]["role"] == "user")
    assert user_done["item"]["content"] == [{"type": "input_audio", "transcript": SAID}]
    assert len(h.of_type("response.output_audio_transcript.delta")) == 3  # the held tokens, all of them
    assert len(h.stages.added("tts")) == 1  # one reply, started at the pause
    context = h.controller.session.context
    assert context.segments[-2].item_id == user_done["item"]["id"] and context.num_tokens > tokens_before


def test_the_asr_reads_the_speech_at_the_lull_so_the_draft_starts_at_the_pause_with_its_words():
    async def scenario(h):
        await h.client("session.update", session={"type": "realtime", "audio": {"input": {
            "transcription": {"model": "whisper-1"}}}})
        await h.speak(600, then_silence_ms=160)  # a lull (100 ms of silence: 4 windows), not yet a pause (200)
        asr_id, = h.stages.added("asr")
        at_lull = (len(h.stages.sent("asr", TurnEndingHint)), h.controller.session.active_turn)
        sent = sum(len(c.data) for c in h.stages.sent("asr", AppendInput) if c.data is not None)
        h.stages.sink("asr", [StageOutput(asr_id, Transcript(SAID, False, sent))])  # the lull's pass
        await h.settle()
        await h.speak(0, then_silence_ms=96)  # the pause
        return at_lull, h.controller.session.active_turn

    (hints, turn_at_lull), draft = asyncio.run(harnessed_voice(scenario))
    assert hints == 1 and turn_at_lull is None  # the pass is asked for at the lull; the reply waits for the pause
    assert draft is not None  # at the pause the draft starts from the lull's text: no second pass was read


def test_speech_resuming_drops_the_draft_unseen_and_the_turn_is_answered_once_it_ends():
    async def scenario(h):
        tokens_before = h.controller.session.context.num_tokens
        draft = await paused(h, "What is the")
        h.stages.think(h.thinker_id, draft.turn_id, [10, 11], WIDTH)
        await h.settle()
        await h.speak(400)  # the user goes on: the pause did not end the turn
        dropped = (h.types(), h.controller.session.context.num_tokens, h.stages.sent("thinker", StopGeneration)[-1])
        await h.speak(0, then_silence_ms=600)
        asr_id, = h.stages.added("asr")
        h.stages.sink("asr", [StageOutput(asr_id, Transcript(SAID, True, 1))])  # the final, of all the speech
        await h.settle()
        return h, draft, tokens_before, dropped

    h, draft, tokens_before, (seen, tokens_after_drop, stop) = asyncio.run(harnessed_voice(scenario))
    assert draft.status == "cancelled" and not set(DRAFT_SEEN) & set(seen)
    assert (h.controller.num_drafts_taken, h.controller.num_drafts_dropped) == (0, 1)
    assert tokens_after_drop == tokens_before and stop.keep_tokens == tokens_before  # its items left, KV too
    assert draft.reply.ids["tts"] in {c.request_id for c in h.stages.sent("tts", AbortRequest)}
    assert len(h.of_type("response.created")) == 1 and h.controller.turn is not draft
    user_done = next(e for e in h.of_type("conversation.item.done") if e["item"]["role"] == "user")
    assert user_done["item"]["content"] == [{"type": "input_audio", "transcript": SAID}]
    texts = [s.item_id for s in h.controller.session.context.segments]
    assert texts[-2:] == [user_done["item"]["id"], h.controller.turn.item_id]
    generating = [c.data for c in h.stages.sent("thinker", AppendInput) if c.data.sampling is not None]
    seeds = [turn_input.sampling.seed - h.orch.config.thinker_sampling.seed for turn_input in generating]
    assert seeds == [1, 1]  # the reply sampled as the session's first, as the draft taken back was


def test_a_client_event_during_the_draft_drops_it_before_it_acts():
    async def scenario(h):
        draft = await paused(h)
        await h.client("conversation.item.create", item={"type": "message", "role": "user",
                                                         "content": [{"type": "input_text", "text": "Hi."}]})
        return h, draft

    h, draft = asyncio.run(harnessed_voice(scenario))
    assert draft.status == "cancelled" and h.of_type("error") == [] and h.controller.num_drafts_dropped == 1
    assert [s.item_id for s in h.controller.session.context.segments][-1] == h.of_type(
        "conversation.item.added")[-1]["item"]["id"]  # the client's item, after what was there before the pause


def test_no_draft_without_preemptive_reply():
    async def scenario(h):
        return await paused(h)

    config = dataclasses.replace(voice_pipeline(), interaction=InteractionConfig(preemptive_reply=False))
    assert asyncio.run(harnessed_voice(scenario, config)) is None


def test_the_deployments_pause_reaches_every_detector_a_session_gets():
    async def scenario(h):
        before = h.controller.monitor.detector.config.pause_ms
        await h.client("session.update", session={"type": "realtime", "audio": {"input": {
            "turn_detection": {"type": "semantic_vad"}}}})
        return before, h.controller.monitor.detector.config.pause_ms

    config = dataclasses.replace(voice_pipeline(), interaction=InteractionConfig(pause_ms=96))
    assert asyncio.run(harnessed_voice(scenario, config)) == (96, 96)
