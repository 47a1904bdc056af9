"""nn.Linear that runs on oneDNN with pre-packed weights, in float32 or bfloat16.

On CPU, PyTorch's default GEMM is slow for the skinny shapes of decoding: over a
whole tiny-omni thinker step (17 linears, weights cold in cache), oneDNN with
weights reordered once for the CPU's blocking takes 2.0-2.6 ms at one row against
3.7-4.2 ms, and 2-3x less at 2-64 rows. A decode step reads every weight once, so
on a larger model it is bound by memory: SmolLM2-135M's weights packed in bfloat16
(half the bytes; its output head stays float32) cut its decode step from 49 to 36 ms
on one core here (benchmarks/log/2026-11-30-voice-agent-capacity.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED_ROWS = 16
PACKABLE = (torch.float32, torch.bfloat16)


def packing_available(weight: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether oneDNN packs `weight` (on the CPU) for multiplying in `dtype` on this machine."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    return weight.device.type == "cpu" and weight.dtype in PACKABLE and dtype in PACKABLE


def packed_matmul(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x @ W.T + bias with W packed by oneDNN, in W's packed dtype, returned in x's dtype and shape."""
    rows = x.reshape(-1, x.shape[-1]).to(packed.dtype)
    out = torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")
    return out.to(x.dtype).reshape(*x.shape[:-1], out.shape[-1])


class PackedLinear(nn.Linear):
    """A Linear whose `pack(dtype)` snapshots its weight for oneDNN, to multiply in `dtype`.

    Contract: call `pack()` after the weights are final (after loading a
    checkpoint); later changes to `weight` are not seen by the packed path until
    `pack()` runs again. Packed in the weight's own dtype, outputs equal F.linear up to
    float rounding; packed in bfloat16, inputs are rounded to bfloat16 and products
    summed in float32, as a bfloat16 model computes. Where oneDNN cannot pack, the
    layer stays plain.
    """

    packed_weight: torch.Tensor | None = None
    packed_bias: torch.Tensor | None = None

    def pack(self, dtype: torch.dtype | None = None) -> None:
        weight, dtype = self.weight.detach(), dtype or self.weight.dtype
        if packing_available(weight, dtype):
            self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(weight.to(dtype), EXPECTED_ROWS)
            self.packed_bias = None if self.bias is None else self.bias.detach().to(dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed_weight is None:
            return F.linear(x, self.weight, self.bias)
        return packed_matmul(x, self.packed_weight, self.packed_bias)


class OutputHead(PackedLinear):
    """A model's output head (logits over a vocabulary): pack_linears packs it in its weight's own dtype
    whatever dtype the other linears get. Its logits are read exactly, divided by a sampler's temperature:
    rounded to bfloat16 (steps of 0.125 at 16-32), SmolLM2-135M at temperature 0.2 answered "What is the
    capital of France?" with "L'Etoile (The Lion) is the capital of France" instead of Paris."""


class FusedLinears:
    """Bias-free linears that share their input, run as one GEMM once packed.

    Not a module: the member linears keep their parameters (and checkpoint names);
    `pack(dtype)` concatenates their weights into one oneDNN-packed weight (no plain copy
    of the concatenation is kept), or, where oneDNN cannot pack, into one plain weight on
    their device in their dtype. Before packing, each member runs on its own. Returns one
    output per member, in order.
    """

    def __init__(self, *linears: nn.Linear) -> None:
        self.linears = linears
        self.sizes = [linear.out_features for linear in linears]
        self.packed: torch.Tensor | None = None
        self.weight: torch.Tensor | None = None  # the concatenation, where it could not be packed

    def pack(self, dtype: torch.dtype | None = None) -> None:
        with torch.no_grad():
            weight = torch.cat([linear.weight for linear in self.linears])
        dtype = dtype or weight.dtype
        if packing_available(weight, dtype):
            self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.to(dtype), EXPECTED_ROWS)
        else:
            self.weight = weight

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.packed is not None:
            return packed_matmul(x, self.packed, None).split(self.sizes, dim=-1)
        if self.weight is not None:
            return F.linear(x, self.weight).split(self.sizes, dim=-1)
        return tuple(linear(x) for linear in self.linears)


def pack_linears(model: nn.Module, dtype: torch.dtype | None = None) -> None:
    """Pack every module's FusedLinears and every other PackedLinear, to multiply in `dtype` (None: each
    weight's own; an OutputHead always in its own), once weights are final. A fused member runs inside its
    FusedLinears only, so it gets no packed copy of its own (on SmolLM2's thinker, 280 MiB saved)."""
    fused = [value for module in model.modules() for value in vars(module).values() if isinstance(value, FusedLinears)]
    members = {id(linear) for group in fused for linear in group.linears}
    for group in fused:
        group.pack(dtype)
    for module in model.modules():
        if isinstance(module, PackedLinear) and id(module) not in members:
            module.pack(None if isinstance(module, OutputHead) else dtype)
