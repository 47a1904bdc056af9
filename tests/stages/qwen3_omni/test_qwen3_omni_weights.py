"""Strict loading from a model folder's safetensors, one file or sharded."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from stages.models.qwen3_omni.thinker import Qwen3OmniThinker
from stages.models.qwen3_omni.weights import INDEX, SafetensorsFolder
from stages.models.weights import CheckpointMismatch


def resharded(source, target, edit=lambda tensors: tensors, config_edit=lambda config: config):
    """`source`'s tensors (after `edit`) in two shards and an index, in `target`; its config after `config_edit`."""
    tensors = edit(load_file(str(source / "model.safetensors")))
    keys = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for name, names in shards.items():
        save_file({key: tensors[key].contiguous() for key in names}, str(target / name))
    weight_map = {key: name for name, names in shards.items() for key in names}
    (target / INDEX).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = json.loads((source / "config.json").read_text())
    (target / "config.json").write_text(json.dumps(config_edit(config)))
    return target


def test_a_sharded_folder_loads_as_the_single_file(tiny, tmp_path):
    one, sharded = Qwen3OmniThinker.from_folder(tiny.folder), Qwen3OmniThinker.from_folder(
        resharded(tiny.folder, tmp_path))
    assert len(set(SafetensorsFolder(tmp_path).file_of.values())) == 2
    for (name, a), (_, b) in zip(one.state_dict().items(), sharded.state_dict().items()):
        assert torch.equal(a, b), name
    assert str(one.lm_head.weight.device) == "cpu" and not one.lm_head.weight.requires_grad


def without(key):
    return lambda tensors: {k: v for k, v in tensors.items() if k != key}


@pytest.mark.parametrize("edit, message", [
    (without("thinker.model.layers.0.mlp.gate.weight"),
     f"{INDEX} has no thinker.model.layers.0.mlp.gate.weight"),
    (lambda t: {**t, "thinker.model.layers.0.self_attn.q_proj.bias": torch.zeros(4)},
     r"model-0000\d-of-00002.safetensors has thinker.model.layers.0.self_attn.q_proj.bias, which the module does not"),
    (lambda t: {**t, "thinker.model.norm.weight": torch.ones(7)},
     r"model-0000\d-of-00002.safetensors has thinker.model.norm.weight of shape \(7,\), expected"),
])
def test_a_missing_unexpected_or_misshapen_tensor_is_named_with_its_file(tiny, tmp_path, edit, message):
    with pytest.raises(CheckpointMismatch, match=message):
        Qwen3OmniThinker.from_folder(resharded(tiny.folder, tmp_path, edit))


def test_a_single_file_names_itself_for_a_missing_tensor(tiny, tmp_path):
    shutil.copy(tiny.folder / "config.json", tmp_path)
    tensors = without("thinker.lm_head.weight")(load_file(str(tiny.folder / "model.safetensors")))
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with pytest.raises(ValueError, match="model.safetensors has no thinker.lm_head.weight"):
        Qwen3OmniThinker.from_folder(tmp_path)


def test_tied_embeddings_need_only_the_embedding_table(tiny, tmp_path):
    def tie(config):
        config["thinker_config"]["tie_word_embeddings"] = True
        return config

    thinker = Qwen3OmniThinker.from_folder(resharded(tiny.folder, tmp_path, without("thinker.lm_head.weight"), tie))
    hidden = torch.randn(2, thinker.config.hidden_size)
    torch.testing.assert_close(thinker.logits(hidden), hidden @ thinker.embed.weight.T)
