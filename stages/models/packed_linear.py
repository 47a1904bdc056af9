"""nn.Linear that runs on oneDNN with pre-packed weights, in float32 or bfloat16, and on 4-bit groups.

On CPU, PyTorch's default GEMM is slow for the skinny shapes of decoding: over a
whole tiny-omni thinker step (17 linears, weights cold in cache), oneDNN with
weights reordered once for the CPU's blocking takes 2.0-2.6 ms at one row against
3.7-4.2 ms, and 2-3x less at 2-64 rows. A decode step reads every weight once, so
on a larger model it is bound by memory: SmolLM2-135M's weights packed in bfloat16
(half the bytes; its output head in float32) cut its decode step from 49 to 36 ms
on one core here (benchmarks/log/2026-11-30-voice-agent-capacity.md).

Decode steps can read a quarter of those bytes: with `int4`, a linear also keeps its
weights in 4-bit groups of 32 inputs (each group's minimum and step: GGUF's Q4_1
blocks, which it holds as the file has them, up to bfloat16 scales), multiplied by
torch's CPU int4 kernel at up to INT4_MAX_ROWS rows; that kernel's cost grows with
the rows, so larger steps (prefills) multiply on the bfloat16 packing. That cut the
step to 20 ms on one core, 17-19 ms with the output head's highest logits rescored
(OutputHead; benchmarks/log/2026-11-30-int4-thinker.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

EXPECTED_ROWS = 16
PACKABLE = (torch.float32, torch.bfloat16)
INT4_GROUP = 32  # inputs a 4-bit group spans: GGUF's Q4_0/Q4_1 blocks
INT4_MAX_ROWS = 6  # steps of more rows multiply on the bfloat16 packing: at 8 rows both cost the same here
HEAD_INT4_MAX_ROWS = 3  # the same for an output head (49152 outputs): at 4 rows both cost about the same
INT4_LEVELS = 15
RESCORED = 128  # per row, the highest logits an OutputHead packed in bfloat16 computes again in float32


def packing_available(weight: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether oneDNN packs `weight` (on the CPU) for multiplying in `dtype` on this machine."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    if dtype == torch.bfloat16 and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return False
    return weight.device.type == "cpu" and weight.dtype in PACKABLE and dtype in PACKABLE


def int4_available(weight: torch.Tensor) -> bool:
    """Whether `weight` (on the CPU) can keep 4-bit groups for torch's int4 kernel, beside a bfloat16 packing."""
    out_features, in_features = weight.shape
    return (packing_available(weight, torch.bfloat16) and hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu")
            and in_features % INT4_GROUP == 0 and out_features % INT4_GROUP == 0)


@dataclass(frozen=True)
class Int4Weight:
    """A weight in 4-bit groups of INT4_GROUP inputs, in torch's CPU int4 layout: each group's values are
    (q - 8) * step + zero for q in 0..15, with `step` and `zero` in bfloat16 (`scales_and_zeros`, one pair
    per group and output)."""

    packed: torch.Tensor
    scales_and_zeros: torch.Tensor
    max_rows: int = INT4_MAX_ROWS  # products of more rows than this multiply on the bfloat16 packing

    @staticmethod
    def quantize(weight: torch.Tensor) -> Int4Weight:
        """Each group from its minimum to its maximum in 15 steps. Weights on such a grid come back as they were
        where bfloat16 holds the step and the zero; GGUF's Q4_1 blocks, dequantized, come back to within the
        bfloat16 rounding of those (their minima and steps are float16)."""
        out_features, in_features = weight.shape
        groups = weight.detach().float().reshape(out_features, in_features // INT4_GROUP, INT4_GROUP)
        low, high = groups.amin(-1), groups.amax(-1)
        step = ((high - low) / INT4_LEVELS).bfloat16().float()
        zero = (low + 8 * step).bfloat16().float()
        levels = ((groups - zero[..., None]) / step.clamp_min(torch.finfo(torch.float32).tiny)[..., None] + 8)
        levels = levels.round().clamp(0, INT4_LEVELS).to(torch.int32).reshape(out_features, in_features)
        scales_and_zeros = torch.stack([step, zero], dim=-1).transpose(0, 1).contiguous().bfloat16()
        return Int4Weight(torch._convert_weight_to_int4pack_for_cpu(levels, 1), scales_and_zeros)

    def matmul(self, rows: torch.Tensor) -> torch.Tensor:
        """rows @ W.T for bfloat16 `rows` [n, in_features], in bfloat16."""
        return torch._weight_int4pack_mm_for_cpu(rows.contiguous(), self.packed, INT4_GROUP, self.scales_and_zeros)


def pack_weight(weight: torch.Tensor, dtype: torch.dtype | None,
                int4: bool) -> tuple[torch.Tensor, Int4Weight | None] | None:
    """`weight` packed by oneDNN to multiply in `dtype` (None: its own; bfloat16 with `int4`), and its 4-bit groups
    with `int4` where its shape allows; None where oneDNN cannot pack it."""
    dtype = torch.bfloat16 if int4 else dtype or weight.dtype
    if not packing_available(weight, dtype):
        return None
    groups = Int4Weight.quantize(weight) if int4 and int4_available(weight) else None
    return torch.ops.mkldnn._reorder_linear_weight(weight.to(dtype), EXPECTED_ROWS), groups


def packed_matmul(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None,
                  int4: Int4Weight | None = None) -> torch.Tensor:
    """x @ W.T + bias with W packed by oneDNN, in W's packed dtype, returned in x's dtype and shape; on `int4`'s
    groups instead where given and x has at most `int4.max_rows` rows."""
    rows = x.reshape(-1, x.shape[-1]).to(packed.dtype)
    if int4 is not None and 0 < len(rows) <= int4.max_rows:
        out = int4.matmul(rows)
        out = out if bias is None else out + bias
    else:
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
    int4_weight: Int4Weight | None = None

    def pack(self, dtype: torch.dtype | None = None, int4: bool = False) -> None:
        """With `int4`, packed in bfloat16 (whatever `dtype`), and in 4-bit groups where its shape allows."""
        packing = pack_weight(self.weight.detach(), dtype, int4)
        if packing is not None:
            self.packed_weight, self.int4_weight = packing
            self.packed_bias = None if self.bias is None else self.bias.detach().to(self.packed_weight.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed_weight is None:
            return F.linear(x, self.weight, self.bias)
        return packed_matmul(x, self.packed_weight, self.packed_bias, self.int4_weight)


class OutputHead(PackedLinear):
    """A model's output head (logits over a vocabulary). Its logits are read exactly, divided by a sampler's
    temperature: rounded to bfloat16 (steps of 0.125 at 16-32), SmolLM2-135M at temperature 0.2 answered "What
    is the capital of France?" with "L'Etoile (The Lion) is the capital of France" instead of Paris.

    So packed beside bfloat16 (or int4) linears, a float32 head packs in bfloat16 (and with int4, in 4-bit groups
    for products of up to HEAD_INT4_MAX_ROWS rows) for a first pass only: the RESCORED highest logits of each
    row are computed again from its plain weight, and come out as a float32 head gives them (argmax and top-k
    sampling up to that k read only those); the others stay rounded. The first pass only picks which logits
    are exact: on SmolLM2-135M, greedy replies came out token for token the same with the head's first pass on
    4-bit groups as on bfloat16, and a 1-row decode step 16-19 % cheaper (benchmarks/log/2026-12-02-voice-cpu-costs.md).
    Packed in any other dtype, or with at most RESCORED outputs, it packs in its weight's own."""

    rescored = False

    def pack(self, dtype: torch.dtype | None = None, int4: bool = False) -> None:
        rescore = ((int4 or dtype == torch.bfloat16) and self.weight.dtype == torch.float32
                   and self.out_features > RESCORED)
        super().pack(torch.bfloat16 if rescore else None, int4=rescore and int4)
        self.rescored = rescore and self.packed_weight is not None
        if self.int4_weight is not None:
            self.int4_weight = replace(self.int4_weight, max_rows=HEAD_INT4_MAX_ROWS)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = super().forward(x)
        if not self.rescored:
            return logits
        rows, first = x.reshape(-1, x.shape[-1]), logits.reshape(-1, logits.shape[-1])
        top = first.topk(RESCORED, dim=-1).indices
        exact = torch.bmm(self.weight[top], rows.unsqueeze(-1)).squeeze(-1)
        exact = exact if self.bias is None else exact + self.bias[top]
        return first.scatter(-1, top, exact).reshape(logits.shape)


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
        self.int4: Int4Weight | None = None
        self.weight: torch.Tensor | None = None  # the concatenation, where it could not be packed

    def pack(self, dtype: torch.dtype | None = None, int4: bool = False) -> None:
        with torch.no_grad():
            weight = torch.cat([linear.weight for linear in self.linears])
        packing = pack_weight(weight, dtype, int4)
        if packing is None:
            self.weight = weight
        else:
            self.packed, self.int4 = packing

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if self.packed is not None:
            return packed_matmul(x, self.packed, None, self.int4).split(self.sizes, dim=-1)
        if self.weight is not None:
            return F.linear(x, self.weight).split(self.sizes, dim=-1)
        return tuple(linear(x) for linear in self.linears)


def pack_linears(model: nn.Module, dtype: torch.dtype | None = None, int4: bool = False) -> None:
    """Pack every module's FusedLinears and every other PackedLinear, to multiply in `dtype` (None: each
    weight's own; with `int4`, bfloat16 and 4-bit groups for decode steps; an OutputHead as its docstring
    says), once weights are final. A fused member runs inside its FusedLinears only, so it gets no packed
    copy of its own (on SmolLM2's thinker, 280 MiB saved).

    Contract: the model computes on its packed weights from now on, so every linear packed here (but an
    OutputHead, whose weight the embeddings may share) keeps no plain copy: its `weight` is emptied, of its
    dtype and on its device, and its parameter names stay (on SmolLM2's thinker, 410 MiB saved). Read or
    save the state dict before packing."""
    fused = [value for module in model.modules() for value in vars(module).values() if isinstance(value, FusedLinears)]
    members = {id(linear) for group in fused for linear in group.linears}
    packed: list[nn.Linear] = []
    for group in fused:
        group.pack(dtype, int4)
        packed += group.linears if group.packed is not None else []
    for module in model.modules():
        if isinstance(module, PackedLinear) and id(module) not in members:
            module.pack(dtype, int4)
            packed += [module] if module.packed_weight is not None and not isinstance(module, OutputHead) else []
    for linear in packed:
        linear.weight = nn.Parameter(linear.weight.new_empty(0), requires_grad=False)
