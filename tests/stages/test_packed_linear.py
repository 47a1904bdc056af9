"""PackedLinear gives F.linear's numbers packed or not, at any number of rows; packed in bfloat16, a bfloat16
linear's; with int4, its 4-bit groups' for decode steps and bfloat16's for larger ones."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stages.models.decoder_config import DecoderConfig
from stages.models.llama import MLP
from stages.models.packed_linear import (
    HEAD_INT4_MAX_ROWS,
    INT4_GROUP,
    INT4_MAX_ROWS,
    RESCORED,
    Int4Weight,
    OutputHead,
    PackedLinear,
    int4_available,
    pack_linears,
    packing_available,
)
from stages.models.qwen3_omni.moe import SwiGLU

BF16_PACKS = packing_available(torch.zeros(1), torch.bfloat16)
INT4 = int4_available(torch.zeros(INT4_GROUP, INT4_GROUP))


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
    assert mlp.down_proj.weight.shape == (16, 24)  # not packed: its plain weight is what it computes with
    torch.testing.assert_close(mlp(x), expected)


def test_a_packed_model_keeps_no_plain_weights_but_its_output_heads_and_its_parameter_names():
    torch.manual_seed(2)
    config = DecoderConfig(vocab_size=32, hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=16,
                           intermediate_size=160)
    model = torch.nn.Sequential(MLP(config), OutputHead(64, 40, bias=False))
    x = torch.randn(3, 64)
    expected, names = model(x), set(model.state_dict())
    pack_linears(model)
    mlp = model[0]
    for linear in (mlp.gate_proj, mlp.up_proj, mlp.down_proj):
        assert (linear.weight.numel(), linear.weight.dtype, linear.weight.device) == (0, torch.float32, x.device)
    assert model[1].weight.shape == (40, 64) and set(model.state_dict()) == names
    with torch.inference_mode():
        torch.testing.assert_close(model(x), expected, atol=1e-4, rtol=1e-4)


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
@pytest.mark.parametrize("int4", [False, True])
def test_an_output_head_beside_bfloat16_linears_gives_its_highest_logits_as_float32_does(int4):
    torch.manual_seed(4)
    head = OutputHead(64, 1000, bias=False)
    model = torch.nn.Sequential(PackedLinear(64, 64), head)
    x = torch.randn(5, 64)
    with torch.inference_mode():
        hidden = model[0](x)
    pack_linears(model, torch.bfloat16, int4=int4)
    assert head.rescored and head.packed_weight.dtype == torch.bfloat16
    with torch.inference_mode():
        got, exact = head(hidden), F.linear(hidden, head.weight)
    top = exact.topk(RESCORED, dim=-1)
    torch.testing.assert_close(got.gather(-1, top.indices), top.values, atol=1e-5, rtol=1e-5)
    assert torch.equal(got.argmax(-1), exact.argmax(-1))
    rounded = torch.ones_like(got, dtype=torch.bool).scatter(-1, got.topk(RESCORED, dim=-1).indices, False)
    assert not torch.equal(got[rounded], exact[rounded])  # the rest are the bfloat16 pass's
    torch.testing.assert_close(got[rounded], exact[rounded], atol=0.05, rtol=0.02)


@pytest.mark.skipif(not INT4, reason="no int4 kernel or bfloat16 GEMM on this CPU")
def test_an_output_head_beside_int4_linears_picks_its_exact_logits_on_groups_for_small_steps():
    torch.manual_seed(6)
    head = OutputHead(64, 1024, bias=False)
    model = torch.nn.Sequential(PackedLinear(64, 64), head)
    pack_linears(model, int4=True)
    assert head.rescored and head.int4_weight.max_rows == HEAD_INT4_MAX_ROWS
    on_groups, on_bfloat16 = int4_read(head.int4_weight, 64), head.weight.detach().bfloat16().float()
    for rows in (1, HEAD_INT4_MAX_ROWS, HEAD_INT4_MAX_ROWS + 1):
        hidden = torch.randn(rows, 64)
        with torch.inference_mode():
            got = head(hidden)
        exact = F.linear(hidden, head.weight)
        top = exact.topk(40, dim=-1)  # voice-cpu samples from its top 40
        torch.testing.assert_close(got.gather(-1, top.indices), top.values, atol=1e-5, rtol=1e-5)
        rounded = torch.ones_like(got, dtype=torch.bool).scatter(-1, got.topk(RESCORED, dim=-1).indices, False)
        passes = [F.linear(hidden.bfloat16().float(), weight)[rounded] for weight in (on_groups, on_bfloat16)]
        first_pass, other = passes if rows <= HEAD_INT4_MAX_ROWS else passes[::-1]
        torch.testing.assert_close(got[rounded], first_pass, atol=0.05, rtol=0.02)  # answered in bfloat16
        assert (got[rounded] - other).abs().max() > 0.1, rows


def test_an_output_head_packed_in_float32_is_exact_everywhere():
    torch.manual_seed(5)
    head = OutputHead(64, 1000, bias=True)
    x = torch.randn(3, 64)
    expected = F.linear(x, head.weight, head.bias)
    pack_linears(torch.nn.Sequential(head))
    assert not head.rescored
    with torch.inference_mode():
        torch.testing.assert_close(head(x), expected, atol=1e-4, rtol=1e-4)


def q4_1_weight(out_features: int, in_features: int, seed: int) -> torch.Tensor:
    """Weights as a Q4_1 file holds them: per group of 32 inputs, a minimum plus 0..15 steps (each level used),
    with a step and a zero (the minimum plus 8 steps) that bfloat16 holds exactly."""
    gen = torch.Generator().manual_seed(seed)
    shape = (out_features, in_features // INT4_GROUP, 1)
    step = (torch.rand(shape, generator=gen) * 0.01 + 0.001).bfloat16().float()
    zero = (torch.randn(shape, generator=gen) * 0.05).bfloat16().float()
    levels = torch.randint(0, 16, (*shape[:2], INT4_GROUP), generator=gen)
    levels[..., 0], levels[..., 1] = 0, 15
    return (zero + (levels - 8) * step).reshape(out_features, in_features)


def int4_read(weight: Int4Weight, in_features: int) -> torch.Tensor:
    """The weight 4-bit groups hold, read through the int4 kernel one input at a time, [out, in]."""
    return weight.matmul(torch.eye(in_features, dtype=torch.bfloat16)).float().T


@pytest.mark.skipif(not INT4, reason="no int4 kernel or bfloat16 GEMM on this CPU")
def test_int4_groups_hold_q4_1_weights_as_the_file_has_them():
    weight = q4_1_weight(64, 96, seed=0)
    read = int4_read(Int4Weight.quantize(weight), 96)
    assert torch.equal(read, weight.bfloat16().float())  # the kernel answers in bfloat16


@pytest.mark.skipif(not INT4, reason="no int4 kernel or bfloat16 GEMM on this CPU")
@pytest.mark.parametrize("bias", [False, True])
def test_int4_decode_steps_read_the_groups_and_larger_steps_the_bfloat16_packing(bias):
    torch.manual_seed(3)
    layer = PackedLinear(96, 64, bias=bias)  # weights off any 4-bit grid: the two paths give different numbers
    grouped, rounded = Int4Weight.quantize(layer.weight), layer.weight.detach().bfloat16().float()
    plain_bias = None if layer.bias is None else layer.bias.bfloat16().float()
    pack_linears(torch.nn.Sequential(layer), int4=True)
    assert layer.int4_weight is not None and layer.packed_weight.dtype == torch.bfloat16
    for rows in (1, INT4_MAX_ROWS, INT4_MAX_ROWS + 1, 40):
        x = torch.randn(rows, 96)
        on_groups = F.linear(x.bfloat16().float(), int4_read(grouped, 96), plain_bias)
        on_bfloat16 = F.linear(x.bfloat16().float(), rounded, plain_bias)
        with torch.inference_mode():
            got = layer(x)
        expected, other = (on_groups, on_bfloat16) if rows <= INT4_MAX_ROWS else (on_bfloat16, on_groups)
        torch.testing.assert_close(got, expected, atol=0.02, rtol=0.01)
        assert (got - other).abs().max() > 0.02, rows


@pytest.mark.skipif(not INT4, reason="no int4 kernel or bfloat16 GEMM on this CPU")
def test_int4_packs_fused_groups_and_skips_the_output_head_and_shapes_off_the_groups():
    config = DecoderConfig(vocab_size=32, hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=16,
                           intermediate_size=160)
    odd = PackedLinear(64, 40)  # 40 outputs: not whole groups
    model = torch.nn.Sequential(MLP(config), odd, OutputHead(40, 64, bias=False))
    x = torch.randn(2, 64)
    expected = model(x)
    pack_linears(model, int4=True)
    mlp = model[0]
    assert mlp.gate_up.int4 is not None and mlp.down_proj.int4_weight is not None
    assert odd.int4_weight is None and odd.packed_weight.dtype == torch.bfloat16
    assert model[2].int4_weight is None and model[2].packed_weight.dtype == torch.float32
    with torch.inference_mode():
        torch.testing.assert_close(model(x), expected, atol=0.05, rtol=0.05)
