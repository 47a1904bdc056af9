"""Turns through asr -> thinker -> tts on real engine threads: Whisper tiny.en hears, a tiny thinker with
seeded random weights answers (random words), Piper speaks; heard audio cuts the reply to its words.

Bound: q_capital's transcript within word error rate 0.17 of its text (one word of six; measured 0,
tests/stages/test_asr_stage.py)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from lab.word_error import word_error_rate
from orchestrator.config import PipelineConfig
from orchestrator.datapath.stage_graph import Edge, StageGraph
from orchestrator.orchestrator import Orchestrator
from orchestrator.session.events import AudioDelta, TextDelta, TurnDone, TurnRequest
from stages.config import SchedulerConfig
from stages.kinds import StageKind
from stages.models.asr_whisper import WhisperConfig
from stages.models.tts_piper import PiperVoiceConfig
from stages.stage_spec import StageSpec
from tests.conftest import read_fixture
from tests.orchestrator.conftest import tiny_pipeline

QUESTION = "What is the capital of France?"
ONE = SchedulerConfig(max_num_seqs=1)


def voice_pipeline() -> PipelineConfig:
    """tiny_pipeline's thinker between the real speech stages, one thread each."""
    return dataclasses.replace(
        tiny_pipeline(), encoder=None, talker=None, vocoder=None, talker_sampling=None,
        asr=StageSpec("asr", "asr", WhisperConfig(partial_every_s=0.5), ONE, threads=1),
        tts=StageSpec("tts", "tts", PiperVoiceConfig(first_segment_words=4), ONE, threads=1),
        graph=StageGraph((Edge(StageKind.ASR, StageKind.THINKER), Edge(StageKind.THINKER, StageKind.TTS))))


async def voice_session(scenario):
    orch = Orchestrator(voice_pipeline())
    await orch.start()
    try:
        return await scenario(orch, orch.open_session("s"))
    finally:
        await orch.stop()


def reply_text(orch: Orchestrator, turn) -> str:
    """What the reply's segment holds after the assistant prefix, as text."""
    prefix = len(orch.pipeline.template.assistant_prefix(False, False))
    return orch.pipeline.tokenizer.decode(turn.segment.token_ids[prefix:])


def test_spoken_audio_enters_the_context_as_its_transcript_tokenized_as_a_text_item():
    async def scenario(orch, session):
        reported = []
        await session.add_user_item("u0", read_fixture("q_capital_espeak_24k.wav"), on_transcript=reported.append)
        return reported, session.context.segments[0].token_ids, orch.pipeline.template

    reported, token_ids, template = asyncio.run(voice_session(scenario))
    assert [t.is_final for t in reported] == [True] and reported[0].item_id == "u0"  # whole audio: no partials
    assert word_error_rate(QUESTION, reported[0].text) <= 0.17, reported[0].text
    assert token_ids == template.user(reported[0].text, 0, True, False)[0]


def test_a_reply_cut_while_its_first_segment_plays_keeps_the_words_heard():
    async def scenario(orch, session):
        await session.add_user_item("u0", text=QUESTION)
        turn = session.start_turn(TurnRequest(max_tokens=24, ignore_eos=True))
        first = await asyncio.wait_for(turn.events.get(), 30)
        while not isinstance(first, AudioDelta):
            first = await asyncio.wait_for(turn.events.get(), 30)
        heard_ms = first.duration_ms / 2
        turn.cancel(heard_ms)
        return turn, heard_ms, reply_text(orch, turn)

    turn, heard_ms, kept = asyncio.run(voice_session(scenario))
    spoken = turn.reply.spoken_text
    start, stop, _ = spoken.segments[0]
    cut = spoken.heard_chars(heard_ms)
    assert start < cut < stop and spoken.text[cut].isspace()  # within the first segment, at a word's end
    # half its audio: about half its characters (a word more or less)
    longest = max(len(word) for word in spoken.text[start:stop].split())
    assert abs((cut - start) - (stop - start) / 2) <= longest + 1
    assert kept.rstrip() == spoken.text[:cut]  # the context keeps the heard words' tokens, no more
    assert turn.status == "cancelled" and turn.usage.unheard.text_tokens == turn.usage.text_tokens - len(
        [s for s in spoken.starts if s < cut])


@pytest.mark.parametrize("where", ["end of the first segment", "half of the second"])
def test_truncating_a_finished_reply_keeps_the_words_of_the_audio_heard(where):
    async def scenario(orch, session):
        await session.add_user_item("u0", text=QUESTION)
        turn = session.start_turn(TurnRequest(max_tokens=40, ignore_eos=True))
        events = []
        while not isinstance(event := await asyncio.wait_for(turn.events.get(), 60), TurnDone):
            events.append(event)
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        (_, stop0, samples0), (start1, stop1, samples1) = turn.reply.spoken_text.segments[:2]
        heard_ms = 1000 * (samples0 if where.startswith("end") else samples0 + samples1 / 2) / 24000
        session.context.truncate_heard(turn.item_id, heard_ms)
        return text, reply_text(orch, turn), turn, (stop0, start1, stop1)

    text, kept, turn, (stop0, start1, stop1) = asyncio.run(voice_session(scenario))
    assert turn.status == "incomplete" and text == turn.reply.spoken_text.text
    if where.startswith("end"):
        assert kept.rstrip() == text[:stop0]
    else:
        assert text[:start1] in kept and len(text[:start1]) < len(kept.rstrip()) < stop1
        assert text.startswith(kept.rstrip())
