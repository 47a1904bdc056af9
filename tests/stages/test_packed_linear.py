"""PackedLinear gives F.linear's numbers packed or not, at any number of rows; packed in bfloat16, a bfloat16
linear's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stages.models.decoder_config import DecoderConfig
from stages.models.llama import MLP
from stages.models.packed_linear import OutputHead, PackedLinear, pack_linears, packing_available
from stages.models.qwen3_omni.moe import SwiGLU

BF16_PACKS = packing_available(torch.zeros(1), torch.bfloat16)


@pytest.mark.parametrize("rows", [0, 1, 2, 7, 8, 64, 300])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_equals_plain_linear(rows, bias):
    torch.manual_seed(rows)
    layer = PackedLinear(96, 200, bias=bias)
    x = torch.randn(rows, 96)
    expected = F.linear(x, layer.weight, layer.bias)
    pack_linears(torch.nn.Sequential(layer))
    with torch.inference_mode():
        got = layer(x)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_packing_keeps_the_state_dict():
    layer = PackedLinear(8, 4)
    names = set(layer.state_dict())
    layer.pack()
    assert set(layer.state_dict()) == names == {"weight", "bias"}


def test_fused_linears_pack_on_their_members_device_in_their_dtype():
    torch.manual_seed(0)
    mlp = SwiGLU(16, 24).to(torch.float64)  # a dtype oneDNN does not pack: the fused GEMM runs as F.linear
    x = torch.randn(5, 16, dtype=torch.float64)
    expected = mlp(x)
    pack_linears(mlp)
    assert mlp.gate_up.packed is None and (mlp.gate_up.weight.dtype, mlp.gate_up.weight.device) == (torch.float64,
                                                                                                    x.device)
    torch.testing.assert_close(mlp(x), expected)


@pytest.mark.skipif(not BF16_PACKS, reason="this CPU has no bfloat16 GEMM in oneDNN")
@pytest.mark.parametrize("shape", [(0, 96), (1, 96), (9, 96), (2, 3, 96)])
@pytest.mark.parametrize("bias", [False, True])
def test_packed_in_bfloat16_a_linear_computes_as_a_bfloat16_one_and_answers_in_float32(shape, bias):
    torch.manual_seed(len(shape))
    layer = PackedLinear(96, 200, bias=bias)
    x = torch.randn(*shape)
    rounded = layer.weight.bfloat16().float(), None if layer.bias is None else layer.bias.bfloat16().float()
    expected = F.linear(x.bfloat16().float(), *rounded)
    layer.pack(torch.bfloat16)
    with torch.inference_mode():
        got = layer(x)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=0.03, rtol=0.01)  # the sums come out rounded to bfloat16
    assert layer.weight.dtype == torch.float32  # the parameter (and the state dict) keep the checkpoint's


@pytest.mark.skipif(not BF16_PACKS, reason="this CPU has no bfloat16 GEMM in oneDNN")
def test_fused_linears_packed_in_bfloat16_keep_no_plain_copy_of_their_concatenation():
    torch.manual_seed(1)
    mlp = MLP(DecoderConfig(vocab_size=32, hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=16,
                            intermediate_size=160))
    x = torch.randn(4, 64)
    expected = mlp(x)
    pack_linears(mlp, torch.bfloat16)
    assert mlp.gate_up.weight is None and mlp.gate_up.packed is not None
    torch.testing.assert_close(mlp(x), expected, atol=0.02, rtol=0.02)


@pytest.mark.skipif(not BF16_PACKS, reason="this CPU has no bfloat16 GEMM in oneDNN")
def test_an_output_head_keeps_its_own_dtype_when_the_other_linears_pack_in_bfloat16():
    model = torch.nn.Sequential(PackedLinear(16, 16), OutputHead(16, 40, bias=False))
    x = torch.randn(3, 16)
    expected = model[1](model[0](x).bfloat16().float())
    pack_linears(model, torch.bfloat16)
    assert (model[0].packed_weight.dtype, model[1].packed_weight.dtype) == (torch.bfloat16, torch.float32)
    with torch.inference_mode():
        torch.testing.assert_close(model(x), expected, atol=0.03, rtol=0.01)
