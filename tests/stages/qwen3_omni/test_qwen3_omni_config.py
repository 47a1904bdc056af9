"""Qwen3-Omni's config.json read into frozen dataclasses; errors name the field by its dotted path."""

import copy
import json

import pytest

from stages.models.qwen3_omni.config import Qwen3OmniConfig
from tests.stages.qwen3_omni.tiny_reference import TOKENS


@pytest.fixture
def data(tiny) -> dict:
    return json.loads((tiny.folder / "config.json").read_text())


def test_the_config_of_a_saved_folder(tiny, data):
    config = Qwen3OmniConfig.from_folder(tiny.folder)
    text = data["thinker_config"]["text_config"]
    assert (config.thinker.num_layers, config.thinker.num_heads, config.thinker.num_kv_heads, config.thinker.head_dim) \
        == (text["num_hidden_layers"], text["num_attention_heads"], text["num_key_value_heads"], text["head_dim"])
    assert config.thinker.shared_expert_intermediate_size is None and config.thinker.rope_theta == 10000.0
    talker = data["talker_config"]
    assert config.talker.decoder.num_experts == talker["text_config"]["num_local_experts"]  # as transformers 5 saves it
    assert config.talker.decoder.norm_topk_prob is False and config.talker.speaker_id == {"ethan": 1070}
    assert config.talker.code_predictor.raw == talker["code_predictor_config"]
    assert config.code2wav.total_upsample == int(tiny.reference.code2wav.total_upsample)
    assert config.tokens.tts_pad_token_id == TOKENS["tts_pad_token_id"] and config.tokens.audio_token_id == 200


def test_dense_and_sparse_layers_follow_mlp_only_layers_and_the_sparse_step(data):
    text = data["thinker_config"]["text_config"]
    text.update(num_hidden_layers=6, decoder_sparse_step=2, mlp_only_layers=[3])
    data["talker_config"]["accept_hidden_layer"] = 1
    config = Qwen3OmniConfig.from_json(data)
    assert [config.thinker.is_sparse(i) for i in range(6)] == [False, True, False, False, False, True]
    data["talker_config"]["text_config"].update(decoder_sparse_step=2, mlp_only_layers=[0])
    talker = Qwen3OmniConfig.from_json(data).talker.decoder
    assert all(talker.is_sparse(i) for i in range(talker.num_layers))  # the reference's talker ignores both


def test_an_original_folders_rope_layout(data):
    text = data["thinker_config"]["text_config"]
    del text["rope_parameters"]
    text.update(rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3], "interleaved": True},
                rope_theta=1000000)
    assert Qwen3OmniConfig.from_json(data).thinker.rope_theta == 1e6
    del text["rope_theta"]
    assert Qwen3OmniConfig.from_json(data).thinker.rope_theta == 1e6  # the reference's default for the thinker
    text["rope_scaling"]["rope_type"] = "yarn"
    with pytest.raises(ValueError, match=r"thinker_config\.text_config\.rope_scaling\.rope_type must be 'default'"):
        Qwen3OmniConfig.from_json(data)


def edited(data: dict, path: str, value=None, delete: bool = False) -> dict:
    data = copy.deepcopy(data)
    *parents, name = path.split(".")
    section = data
    for parent in parents:
        section = section[parent]
    if delete:
        section.pop(name, None)
    else:
        section[name] = value
    return data


@pytest.mark.parametrize("path, value, message", [
    ("talker_config.text_config.num_local_experts", None,
     "config.json: talker_config.text_config.num_experts is missing"),
    ("thinker_config.text_config.hidden_size", None, "config.json: thinker_config.text_config.hidden_size is missing"),
    ("talker_config.code_predictor_config", None, "config.json: talker_config.code_predictor_config is missing"),
    ("thinker_config.text_config.hidden_size", "64",
     "config.json: thinker_config.text_config.hidden_size must be an integer, got '64'"),
    ("thinker_config.text_config.num_experts_per_tok", True,
     "config.json: thinker_config.text_config.num_experts_per_tok must be an integer, got True"),
    ("thinker_config.text_config.mlp_only_layers", [1, "2"],
     r"config.json: thinker_config.text_config.mlp_only_layers must be a list of integers"),
    ("talker_config.text_config.norm_topk_prob", "no",
     "config.json: talker_config.text_config.norm_topk_prob must be true or false, got 'no'"),
    ("thinker_config.text_config.rms_norm_eps", 0,
     r"config.json: thinker_config.text_config.rms_norm_eps must be positive"),
    ("talker_config.num_code_groups", 3,
     r"config.json: talker_config.num_code_groups \(3\) must equal "
     r"talker_config.code_predictor_config.num_code_groups"),
    ("talker_config.codec_bos_id", 5000,
     r"config.json: talker_config.codec_bos_id \(5000\) is not below talker_config.text_config.vocab_size"),
    ("tts_pad_token_id", 999,
     r"config.json: tts_pad_token_id \(999\) is not below thinker_config.text_config.vocab_size"),
    ("talker_config.accept_hidden_layer", 9, r"config.json: talker_config.accept_hidden_layer \(9\) exceeds"),
    ("thinker_config.text_config.hidden_act", "gelu",
     "config.json: thinker_config.text_config.hidden_act must be 'silu'"),
])
def test_a_missing_wrong_or_inconsistent_field_is_named_by_its_path(data, path, value, message):
    with pytest.raises(ValueError, match=message):
        Qwen3OmniConfig.from_json(edited(data, path, value, delete=value is None))


def test_the_folder_is_named_in_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        Qwen3OmniConfig.from_folder(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        Qwen3OmniConfig.from_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"thinker_config": {}}))
    with pytest.raises(ValueError, match=rf"{tmp_path / 'config.json'}: talker_config is missing"):
        Qwen3OmniConfig.from_folder(tmp_path)
