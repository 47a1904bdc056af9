"""PackedLinear gives F.linear's numbers packed or not, at any number of rows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from stages.models.packed_linear import PackedLinear, pack_linears


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
