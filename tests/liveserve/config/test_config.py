"""YAML config loading: the embedded default and the lab's config load; every mistake names its field."""

from __future__ import annotations

import math

import pytest

from liveserve.config.document import Override
from liveserve.config.loader import LAB_CONFIG, load_config
from liveserve.config.reader import ConfigError
from orchestrator.datapath.stage_graph import ChunkSizes
from stages.kinds import StageKind
from stages.policies.fcfs import FCFSParams
from stages.policies.urgency import UrgencyParams
from tests.liveserve.config.config_variant import write_variant


def test_the_embedded_default_is_the_voice_agent_with_liveserves_policies():
    config = load_config()
    pipeline = config.pipeline
    assert config.model_name == "smollm2-135m-voice"
    assert pipeline.graph.kinds == (StageKind.ASR, StageKind.THINKER, StageKind.TTS)
    assert pipeline.thinker.gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert {spec.scheduler.policy for spec in pipeline.stages} == {"urgency"}
    assert (pipeline.thinker.kv.eviction, pipeline.thinker.kv.preload) == ("next_use", True)
    assert pipeline.thinker.kv.host_blocks > 0
    assert (pipeline.thinker.linear_dtype, pipeline.thinker.dtype, pipeline.thinker.threads) == ("int4", "float32", 1)


def test_the_lab_config_is_tiny_omni():
    config = load_config(LAB_CONFIG)
    pipeline = config.pipeline
    assert config.model_name == "tiny-omni"
    assert pipeline.encoder.model.output_size == pipeline.thinker.model.hidden_size
    assert pipeline.talker.model.thinker_hidden_size == pipeline.thinker.model.hidden_size
    assert pipeline.vocoder.model.codec_vocab_size == pipeline.talker.model.codec_vocab_size
    # the vocoder's first chunk is what the talker makes of the reply's first token
    assert pipeline.graph.edge("talker", "vocoder").chunks == ChunkSizes(3, 16, ramp=True)
    assert pipeline.talker.model.frames_per_token == 3
    assert (pipeline.thinker.threads, pipeline.talker.threads, pipeline.vocoder.threads) == (None, 1, 1)
    assert config.runtime.placement == "processes"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["model"]["thinker"].update(num_heads=5), r"model\.thinker: num_heads \(5\) must be a multiple"),
        (lambda d: d["model"]["thinker"].update(hiden_size=3), r"model\.thinker\.hiden_size: unknown field \(did you mean 'hidden_size'\?\)"),
        (lambda d: d["model"]["thinker"].update(num_layers="four"), r"model\.thinker\.num_layers: expected int, got 'four'"),
        (lambda d: d["stages"]["thinker"]["kv"].update(num_blocks=0), r"stages\.thinker\.kv: num_blocks must be a positive integer"),
        (lambda d: d["stages"]["talker"]["scheduler"].update(policy="lifo"), r"stages\.talker.*unknown scheduling policy 'lifo'"),
        (lambda d: d["stages"]["thinker"]["sampling"].update(temperature=-1), r"stages\.thinker\.sampling: temperature"),
        (lambda d: d["graph"][2].update(first_chunk=0), r"graph\[2\]: first_chunk must be a positive integer"),
        (lambda d: d["model"]["vocoder"].update(samples_per_frame=-3), r"model\.vocoder: samples_per_frame"),
        (lambda d: d["model"]["thinker"].pop("hidden_size"), r"model\.thinker\.hidden_size: required"),
        (lambda d: d.update(extra=1), r"extra: unknown field"),
        (lambda d: d["stages"]["talker"].update(threads=0), r"stages\.talker: threads must be a positive integer"),
        (lambda d: d["stages"]["vocoder"].update(threads="two"), r"stages\.vocoder\.threads: expected"),
        (lambda d: d["stages"]["thinker"].update(linear_dtype="int8"),
         r"stages\.thinker: linear_dtype: stage thinker packs its linears in one of float32, bfloat16, int4, "
         r"natively on the CPU only; got 'int8'"),
        (lambda d: d["runtime"].update(placement="kubernetes"),
         r"runtime: placement must be one of \('processes', 'threads', 'ray'\), got 'kubernetes'"),
        (lambda d: d["runtime"].update(ray={"address": "auto", "num_gpus": 4}),
         r"runtime\.ray: num_gpus sizes a Ray instance started here"),
        (lambda d: d["runtime"].update(ray={"adress": "auto"}), r"runtime\.ray\.adress: unknown field"),
        (lambda d: d["stages"]["thinker"]["kv"].update(preload_at="speech_end"),
         r"stages\.thinker\.kv: preload_at must be one of \('speech_start', 'pause'\), got 'speech_end'"),
        (lambda d: d["stages"]["thinker"]["scheduler"].update(urgency={"p_resume_ms": 2500}),
         r"stages\.thinker\.scheduler\.urgency: p_resume_ms must be a number between p_safe_ms"),
        (lambda d: d["stages"]["thinker"]["scheduler"].update(urgency={"at_risk_prefill_tokens": 0}),
         r"stages\.thinker\.scheduler\.urgency: at_risk_prefill_tokens must be a positive integer, got 0"),
        (lambda d: d.update(interaction={"pause_ms": -1}),
         r"interaction: pause_ms must be a number of ms in \[0, 10000\], got -1"),
        (lambda d: d.update(interaction={"preemptive_reply": "maybe"}),
         r"interaction\.preemptive_reply: expected bool, got 'maybe'"),
    ],
)
def test_config_mistakes_name_the_field(tmp_path, edit, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write_variant(tmp_path, edit))


def test_unreadable_config_files(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed")
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(bad)
    listed = tmp_path / "list.yaml"
    listed.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(listed)


def test_each_policys_parameters_are_a_mapping_named_after_it_and_the_chosen_ones_go_in(tmp_path):
    thinker_params = load_config(LAB_CONFIG).pipeline.thinker.scheduler.params  # tiny-omni-cpu: its cap, no yields
    assert thinker_params == UrgencyParams(at_risk_prefill_tokens=256, p_yield_ms=math.inf)
    paced = load_config(write_variant(tmp_path, lambda d: d["stages"]["thinker"]["scheduler"].update(
        urgency={"p_safe_ms": 300, "p_resume_ms": 600})))
    assert paced.pipeline.thinker.scheduler.params == UrgencyParams(p_safe_ms=300.0, p_resume_ms=600.0)
    assert paced.pipeline.talker.scheduler.params == UrgencyParams()
    switched = load_config(write_variant(tmp_path, lambda d: d["stages"]["thinker"]["scheduler"].update(
        policy="fcfs", urgency={"p_safe_ms": 300})))  # a preset switches the policy; urgency's stay valid
    assert switched.pipeline.thinker.scheduler.policy == "fcfs"
    assert switched.pipeline.thinker.scheduler.params == FCFSParams()
    overridden = load_config(LAB_CONFIG, [Override.parse("stages.talker.scheduler.urgency.p_max_ms=.inf")])
    assert overridden.pipeline.talker.scheduler.params == UrgencyParams(p_max_ms=math.inf)


@pytest.mark.parametrize(
    ("scheduler", "message"),
    [
        ({"policy": "fcfs", "urgency": {"p_safe_ms": 0}},
         r"stages\.thinker\.scheduler\.urgency: p_safe_ms must be a finite number > 0, got 0"),
        ({"urgency": {"p_yield_ms": "soon"}}, r"stages\.thinker\.scheduler\.urgency\.p_yield_ms: expected float"),
        ({"urgency": {"p_saf_ms": 300}},
         r"stages\.thinker\.scheduler\.urgency\.p_saf_ms: unknown field \(did you mean 'p_safe_ms'\?\)"),
        ({"fcfs": {"p_safe_ms": 300}}, r"stages\.thinker\.scheduler\.fcfs\.p_safe_ms: unknown field"),
        ({"p_safe_ms": 300}, r"stages\.thinker\.scheduler\.p_safe_ms: unknown field"),
        ({"params": {}}, r"stages\.thinker\.scheduler\.params: unknown field"),
        ({"policy": "edf"},
         r"stages\.thinker\.scheduler: unknown scheduling policy 'edf'; choose from \['fcfs', 'urgency'\]"),
    ],
)
def test_scheduler_parameter_mistakes_name_the_field(tmp_path, scheduler, message):
    with pytest.raises(ConfigError, match=message):
        load_config(write_variant(tmp_path, lambda d: d["stages"]["thinker"]["scheduler"].update(scheduler)))
