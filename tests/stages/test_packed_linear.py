"""PackedLinear gives F.linear's numbers packed or not, at any number of rows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stages.models.packed_linear import PackedLinear, pack_linears
from stages.models.qwen3_omni.moe import SwiGLU


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
    assert (mlp.gate_up.fused.weight.dtype, mlp.gate_up.fused.weight.device) == (torch.float64, x.device)
    torch.testing.assert_close(mlp(x), expected)
