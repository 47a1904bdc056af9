"""The reply shape is picked by the stages of the graph's reply path; a turn that is not spoken gets none."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.datapath.stage_graph import Edge, StageGraph
from orchestrator.session.events import TurnUsage, UnheardWork
from orchestrator.session.reply.registry import REPLY_SHAPES, new_reply, reply_shape, voice_of
from orchestrator.session.reply.silent import SilentReply
from orchestrator.session.reply.talker_vocoder import TalkerVocoderReply, TalkerVocoderVoice
from orchestrator.session.reply.tts import TTSVoice
from stages.kinds import StageKind
from stages.models.tts_piper import PiperVoiceConfig
from stages.stage_spec import StageSpec
from tests.orchestrator.conftest import SCHED, tiny_pipeline
from tests.orchestrator.session.reply.recording_bus import recording_bus

TTS_GRAPH = StageGraph((Edge(StageKind.THINKER, StageKind.TTS),))
TEXT_GRAPH = StageGraph((Edge(StageKind.ENCODER, StageKind.THINKER),))


def test_the_reply_path_picks_the_shape():
    assert reply_shape(StageGraph.omni()) is TalkerVocoderVoice
    assert reply_shape(TTS_GRAPH) is TTSVoice
    assert reply_shape(TEXT_GRAPH) is None


def test_a_reply_path_no_shape_speaks_through_is_refused(monkeypatch):
    monkeypatch.delitem(REPLY_SHAPES, (StageKind.TTS,))
    with pytest.raises(ValueError, match="thinker -> tts"):
        reply_shape(TTS_GRAPH)


def test_the_voice_holds_the_numbers_of_its_shape():
    omni = voice_of(tiny_pipeline())
    assert (omni.sample_rate, omni.samples_per_frame, omni.frame_ms, omni.frames_per_token) == (24000, 1920, 80.0, 2)
    tts_config = dataclasses.replace(
        tiny_pipeline(), talker=None, vocoder=None, talker_sampling=None, graph=TTS_GRAPH, encoder=None,
        tts=StageSpec("tts", "tts", PiperVoiceConfig(first_segment_words=3, max_segment_words=12), SCHED))
    assert voice_of(tts_config) == TTSVoice(TTS_GRAPH.reply_path, 24000, 1920, 80.0, 3, 12)
    assert voice_of(dataclasses.replace(tiny_pipeline(), talker=None, vocoder=None, talker_sampling=None,
                                        graph=TEXT_GRAPH)) is None


@pytest.mark.parametrize("voice, speak", [(None, True), ("omni", False)])
def test_a_reply_that_is_not_spoken_is_silent(voice, speak):
    voice = voice_of(tiny_pipeline()) if voice == "omni" else voice
    reply = new_reply(voice, speak, "s", 0, recording_bus(), TurnUsage(text_tokens=5))
    assert isinstance(reply, SilentReply) and reply.ids == {} and reply.voice is None
    # No token is spoken, the reply ends with its text, and nothing of it is heard or unheard.
    assert not reply.speak(0, None, "Hi") and not reply.end_text()
    assert reply.heard_tokens(0, 300.0) == 0 and reply.unheard(300.0) == UnheardWork(300.0, 0, 0, 0)


def test_a_spoken_reply_takes_the_pipelines_shape():
    reply = new_reply(voice_of(tiny_pipeline()), True, "s", 4, recording_bus(), TurnUsage())
    assert isinstance(reply, TalkerVocoderReply) and reply.ids == {"talker": "s/talker#4", "vocoder": "s/vocoder#4"}
