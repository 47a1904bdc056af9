"""A history branch's parameters: seeded apart from the model's own, or the checkpoint's when it has them."""

import pytest
import torch
from safetensors.torch import save_file

from stages.models.decoder_config import DecoderConfig
from stages.models.llama import LlamaForCausalLM, add_history, is_history_name
from stages.models.weights import CheckpointMismatch, init_deterministic, load_checkpoint

CONFIG = DecoderConfig(vocab_size=50, hidden_size=16, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=8,
                       intermediate_size=32, max_position=32)


def seeded(seed: int = 0, history: bool = True) -> LlamaForCausalLM:
    model = LlamaForCausalLM(CONFIG)
    init_deterministic(model, seed)
    if history:
        add_history(model, seed)
    return model


def tensors(model, part=lambda name: True) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in model.state_dict().items() if part(name)}


def test_seeded_history_leaves_the_models_weights_as_they_were_and_is_reproducible():
    plain, with_history = tensors(seeded(history=False)), tensors(seeded())
    history = {name: t for name, t in with_history.items() if is_history_name(name)}
    assert {name.split(".history.")[1] for name in history} == {
        "a_log", "x_proj.weight", "dt_proj.weight", "dt_proj.bias", "c_proj.weight"}
    assert len(history) == 5 * CONFIG.num_layers
    assert all(torch.equal(plain[name], t) for name, t in with_history.items() if name in plain)
    assert all(torch.equal(t, tensors(seeded())[name]) for name, t in history.items())
    assert not torch.equal(history["model.layers.0.self_attn.history.c_proj.weight"],
                           tensors(seeded(1))["model.layers.0.self_attn.history.c_proj.weight"])


def test_a_checkpoint_with_history_tensors_gives_them_and_one_without_leaves_them_seeded(tmp_path):
    trained = seeded(5)
    full, base = tmp_path / "full.safetensors", tmp_path / "base.safetensors"
    save_file({n: t.contiguous() for n, t in tensors(trained).items() if n != "lm_head.weight"}, str(full))
    save_file({n: t.contiguous() for n, t in tensors(trained, lambda n: not is_history_name(n)).items()
               if n != "lm_head.weight"}, str(base))
    for path, expected_history in ((full, trained), (base, seeded(0))):
        model = LlamaForCausalLM(CONFIG)
        init_deterministic(model, 0)
        load_checkpoint(model, path, part=lambda name: not is_history_name(name))
        add_history(model, 0, path)
        got, want = tensors(model), tensors(expected_history)
        assert all(torch.equal(got[name], want[name]) for name in got if is_history_name(name))
        assert all(torch.equal(got[name], tensors(trained)[name]) for name in got if not is_history_name(name))


def test_a_checkpoint_with_only_part_of_the_history_is_refused(tmp_path):
    partial = tmp_path / "partial.safetensors"
    save_file({n: t.contiguous() for n, t in tensors(seeded()).items() if n.startswith("model.layers.0.")},
              str(partial))
    model = seeded()
    with pytest.raises(CheckpointMismatch, match=r"missing model\.layers\.1\.self_attn\.history\."):
        add_history(model, 0, partial)
