"""The input shape is picked by the stages of the graph's input path; what a shape lacks is refused."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.datapath.stage_graph import Edge, StageGraph
from orchestrator.session.hearing.asr import ASRHearing
from orchestrator.session.hearing.encoder import EncoderHearing
from orchestrator.session.hearing.registry import HEARING_SHAPES, hearing_of, hearing_shape
from orchestrator.session.hearing.text_only import TextOnly
from stages.kinds import StageKind
from stages.models.asr_whisper import WhisperConfig
from stages.stage_spec import StageSpec
from tests.orchestrator.conftest import SCHED, tiny_pipeline

ASR_GRAPH = StageGraph((Edge(StageKind.ASR, StageKind.THINKER),))
TEXT_GRAPH = StageGraph(())
NO_AUDIO = "this pipeline takes no audio: its graph has no encoder"
NO_SPEECH = "this pipeline transcribes no speech: its graph has no asr stage"


def unvoiced_pipeline(graph: StageGraph, **stages):
    """tiny-omni's thinker behind `graph`'s input path, its replies text only."""
    return dataclasses.replace(tiny_pipeline(), encoder=None, talker=None, vocoder=None, talker_sampling=None,
                               graph=graph, **stages)


def asr_pipeline(partial_every_s: float | None = 0.5):
    return unvoiced_pipeline(ASR_GRAPH, asr=StageSpec("asr", "asr", WhisperConfig(partial_every_s=partial_every_s),
                                                      SCHED))


def test_the_input_path_picks_the_shape():
    assert hearing_shape(StageGraph.omni()) is EncoderHearing
    assert hearing_shape(ASR_GRAPH) is ASRHearing
    assert hearing_shape(TEXT_GRAPH) is TextOnly


def test_an_input_path_no_shape_hears_through_is_refused(monkeypatch):
    monkeypatch.delitem(HEARING_SHAPES, (StageKind.ASR,))
    with pytest.raises(ValueError, match="asr -> thinker"):
        hearing_shape(ASR_GRAPH)


def test_the_encoder_shape_encodes_in_its_chunks_and_transcribes_nothing():
    hearing = hearing_of(tiny_pipeline())
    assert hearing.encodes and not hearing.transcribes and hearing.path == (StageKind.ENCODER,)
    # A user item's audio is encoded in the encoder's own chunks; a duplex stream names its own.
    request = hearing.encoder_request("s/encoder", 1.5)
    assert (request.arrival_time, request.chunk_frames, request.samples_per_frame) == (1.5, 25, 1280)
    assert hearing.encoder_request("s/duplex", 0.0, chunk_frames=1).chunk_frames == 1
    with pytest.raises(ValueError, match=NO_SPEECH):
        hearing.transcription(None, "s", "item", print)


def test_the_asr_shape_holds_its_partial_pace_and_takes_no_audio():
    assert hearing_of(asr_pipeline()) == ASRHearing((StageKind.ASR,), 0.5)
    hearing = hearing_of(asr_pipeline(None))
    assert hearing.transcribes and not hearing.encodes and hearing.partial_every_s is None
    with pytest.raises(ValueError, match=NO_AUDIO):
        hearing.encoder_request("s/encoder", 0.0)


def test_a_text_only_pipeline_refuses_audio_and_speech():
    hearing = hearing_of(unvoiced_pipeline(TEXT_GRAPH))
    assert hearing == TextOnly(()) and not (hearing.encodes or hearing.transcribes)
    with pytest.raises(ValueError, match=NO_AUDIO):
        hearing.encoder_request("s/encoder", 0.0)
    with pytest.raises(ValueError, match=NO_SPEECH):
        hearing.transcription(None, "s", "item", print)
