"""Checkpoints load strictly, and a misfit is named before any tensor is read."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file, save_model

from stages.factory import MODELS
from stages.models.decoder_config import DecoderConfig
from stages.models.llama import LlamaForCausalLM
from stages.models.weights import CheckpointMismatch, check_checkpoint, init_deterministic, load_checkpoint

CONFIG = DecoderConfig(vocab_size=40, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8,
                       intermediate_size=32, max_position=64)


def thinker(seed: int) -> LlamaForCausalLM:
    model = LlamaForCausalLM(CONFIG)
    init_deterministic(model, seed)
    return model


def test_a_saved_thinker_loads_into_another_with_its_tied_head(tmp_path):
    path = tmp_path / "thinker.safetensors"
    save_model(thinker(seed=1), str(path))  # the tied LM head is stored once, under one name
    loaded = thinker(seed=2)
    check_checkpoint(loaded, path)
    load_checkpoint(loaded, path)
    for (name, got), want in zip(loaded.state_dict().items(), thinker(seed=1).state_dict().values()):
        assert torch.equal(got, want), name
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight  # still tied


def test_a_misfit_is_named_alike_by_the_header_check_and_by_loading(tmp_path):
    tensors = {name: t.clone() for name, t in thinker(seed=1).state_dict().items() if name != "lm_head.weight"}
    tensors.pop("model.norm.weight")
    tensors["model.layers.0.mlp.up_proj.weight"] = torch.zeros(31, 16)
    tensors["model.extra"] = torch.zeros(1)
    path = tmp_path / "thinker.safetensors"
    save_file(tensors, str(path))
    model, before = thinker(seed=2), thinker(seed=2).state_dict()
    messages = []
    for attempt in (check_checkpoint, load_checkpoint):
        with pytest.raises(CheckpointMismatch) as raised:
            attempt(model, path)
        messages.append(str(raised.value))
    assert messages[0] == messages[1]
    assert "missing model.norm.weight" in messages[0] and "unexpected model.extra" in messages[0]
    assert "model.layers.0.mlp.up_proj.weight has shape (31, 16), expected (32, 16)" in messages[0]
    assert all(torch.equal(model.state_dict()[n], t) for n, t in before.items())  # unchanged on error


def test_a_missing_file_is_named(tmp_path):
    for attempt in (check_checkpoint, load_checkpoint):
        with pytest.raises(FileNotFoundError, match="checkpoint not found: .*nothing.safetensors"):
            attempt(thinker(seed=0), tmp_path / "nothing.safetensors")


def test_the_header_check_needs_no_weights_in_memory(tmp_path):
    path = tmp_path / "thinker.safetensors"
    save_model(thinker(seed=1), str(path))
    with torch.device("meta"):
        model = MODELS["thinker"](CONFIG)
    check_checkpoint(model, path)  # a meta module: shapes only, no data
    assert model.lm_head.weight.is_meta
