"""Tiny Qwen3-Omni folders: the same bytes for the same seed, a tokenizer that agrees with config.json, and a
reference that loads every preset and replies to typed and spoken prompts."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from lab.qwen3_omni.tiny_folder import NUM_CODEC_SPECIAL_IDS, SHAPES, write_tiny_folder
from lab.qwen3_omni.tiny_tokenizer import SPECIAL_TOKENS
from tests.lab.qwen3_omni.reference import ReferenceOmni

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
SPOKEN_QUESTION = [{"role": "user", "content": [{"type": "audio", "audio": "question.wav"}]}]
CONFIG_TOKENS = {
    "im_start_token_id": "<|im_start|>", "im_end_token_id": "<|im_end|>", "tts_pad_token_id": "<tts_pad>",
    "tts_bos_token_id": "<tts_text_bos>", "tts_eos_token_id": "<tts_text_eod>", "system_token_id": "system",
    "user_token_id": "user", "assistant_token_id": "assistant"}
MEDIA_TOKENS = {
    "audio_token_id": "<|audio_pad|>", "audio_start_token_id": "<|audio_start|>", "audio_end_token_id": "<|audio_end|>",
    "image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>", "vision_start_token_id": "<|vision_start|>"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("qwen3_omni")
    return {name: write_tiny_folder(root / name, shape, seed=0) for name, shape in SHAPES.items()}


@pytest.fixture(scope="module")
def references(folders) -> dict[str, ReferenceOmni]:
    return {name: ReferenceOmni.load(folder) for name, folder in folders.items()}


def digests(folder: Path) -> dict[str, str]:
    return {file.name: hashlib.sha256(file.read_bytes()).hexdigest() for file in sorted(folder.iterdir())}


def test_a_shape_and_seed_always_write_the_same_bytes(folders, tmp_path):
    again = write_tiny_folder(tmp_path / "again", SHAPES["tiny-a"], seed=0)
    other_seed = write_tiny_folder(tmp_path / "other", SHAPES["tiny-a"], seed=1)
    assert digests(again) == digests(folders["tiny-a"])
    changed = {name for name, digest in digests(other_seed).items() if digest != digests(again)[name]}
    assert changed and all(name.endswith(".safetensors") for name in changed)  # weights only


@pytest.mark.parametrize("name", SHAPES)
def test_the_weights_are_sharded_in_the_checkpoint_layout(folders, name):
    index = json.loads((folders[name] / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) >= 2
    assert "thinker.model.layers.0.mlp.experts.0.gate_proj.weight" in index["weight_map"]
    assert "talker.model.layers.0.mlp.experts.0.down_proj.weight" in index["weight_map"]
    assert not [key for key in index["weight_map"] if key.endswith("gate_up_proj")]  # not transformers' fused form


@pytest.mark.parametrize("name", SHAPES)
def test_the_tokenizer_spells_config_jsons_ids(folders, name):
    config = json.loads((folders[name] / "config.json").read_text())
    tokenizer = Tokenizer.from_file(str(folders[name] / "tokenizer.json"))
    vocab_size = config["thinker_config"]["text_config"]["vocab_size"]
    assert tokenizer.get_vocab_size() == vocab_size
    assert [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS] == list(
        range(vocab_size - len(SPECIAL_TOKENS), vocab_size))
    assert {key: tokenizer.encode(token).ids for key, token in CONFIG_TOKENS.items()} == {
        key: [config[key]] for key in CONFIG_TOKENS}
    for sub_config in (config["thinker_config"], config["talker_config"]):
        assert {key: sub_config[key] for key in MEDIA_TOKENS} == {
            key: tokenizer.token_to_id(token) for key, token in MEDIA_TOKENS.items()}
    assert config["thinker_config"]["user_token_id"] == config["user_token_id"]
    assert config["thinker_config"]["vision_end_token_id"] == tokenizer.token_to_id("<|vision_end|>")


@pytest.mark.parametrize("name", SHAPES)
def test_the_codec_ids_sit_in_the_range_the_reference_suppresses(folders, name):
    talker = json.loads((folders[name] / "config.json").read_text())["talker_config"]
    codebook_size, vocab_size = SHAPES[name].codebook_size, talker["text_config"]["vocab_size"]
    special = [talker[key] for key in ("codec_pad_id", "codec_bos_id", "codec_eos_token_id", "codec_nothink_id",
                                       "codec_think_bos_id", "codec_think_eos_id")]
    assert vocab_size == codebook_size + NUM_CODEC_SPECIAL_IDS
    assert all(codebook_size <= token < vocab_size for token in special + list(talker["speaker_id"].values()))
    assert talker["code_predictor_config"]["vocab_size"] == codebook_size


@pytest.mark.parametrize("name", SHAPES)
def test_every_preset_replies_in_text_and_codes(references, name):
    reference = references[name]
    reply = reference.reply(*reference.prompt_ids(QUESTION), thinker_max_new_tokens=8, talker_max_new_tokens=24)
    assert 0 < len(reply.text_token_ids) <= 8
    assert reply.codes.shape[0] == SHAPES[name].num_code_groups and reply.codes.shape[1] > 0
    assert 0 <= reply.codes.min() and reply.codes.max() < SHAPES[name].codebook_size
    assert reply.wav.ndim == 1 and reply.wav.numel() > 0


def test_the_typed_prompt_is_the_chat_template_with_the_generation_prompt(references):
    reference = references["tiny-a"]
    config = reference.model.config
    ids = reference.prompt_ids(QUESTION).input_ids[0].tolist()
    newline = reference.tokenizer("\n")["input_ids"]
    assert ids[:2] == [config.im_start_token_id, config.user_token_id]
    assert ids[-3:] == [config.im_start_token_id, config.assistant_token_id, *newline]


def test_a_spoken_prompt_has_one_pad_per_audio_encoder_frame_and_gets_a_reply(references, speech_16k):
    reference = references["tiny-b"]
    prompt = reference.prompt_ids(SPOKEN_QUESTION, speech_16k)
    thinker = reference.model.thinker
    encoded = thinker.get_audio_features(prompt.input_features, prompt.feature_attention_mask).last_hidden_state
    assert (prompt.input_ids == thinker.config.audio_token_id).sum() == encoded.shape[0]
    reply = reference.reply(*prompt, thinker_max_new_tokens=8, talker_max_new_tokens=24)
    assert reply.text_token_ids and reply.codes.shape[1] > 0


def test_audio_must_match_the_audio_parts(references, speech_16k):
    with pytest.raises(ValueError, match="audio"):
        references["tiny-a"].prompt_ids(QUESTION, speech_16k)


def test_the_default_speaker_is_ethan_when_configured_else_the_first(references, monkeypatch):
    talker_config = references["tiny-a"].model.config.talker_config
    assert references["tiny-a"].default_speaker() == "Ethan"
    monkeypatch.setattr(talker_config, "speaker_id", {"chelsie": 1, "aiden": 2})
    assert references["tiny-a"].default_speaker() == "chelsie"
