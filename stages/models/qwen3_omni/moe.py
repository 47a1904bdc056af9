"""Qwen3-Omni's feed-forward blocks: a top-k routed mixture of SwiGLU experts, and the talker's variant with a
shared expert behind a sigmoid gate. Parameter names follow the original checkpoints (mlp.gate.weight,
mlp.experts.{e}.gate_proj.weight, mlp.shared_expert.*, mlp.shared_expert_gate.weight)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from stages.models.llama import MLP
from stages.models.packed_linear import PackedLinear
from stages.models.qwen3_omni.config import MoeDecoderConfig


class _Sizes(NamedTuple):
    hidden_size: int
    intermediate_size: int


class SwiGLU(MLP):
    """llama's MLP at the given sizes: an expert, the shared expert or a dense layer."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__(_Sizes(hidden_size, intermediate_size))


class TopKRouter(nn.Module):
    """Routing as the reference does it: softmax over the router logits in float32, the top k, renormalised
    to sum to one if `norm_topk_prob`, then cast back to the logits' dtype."""

    def __init__(self, config: MoeDecoderConfig) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))
        self.top_k, self.norm_topk_prob = config.num_experts_per_tok, config.norm_topk_prob

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [rows, hidden] -> (weights [rows, k], expert ids [rows, k])."""
        logits = nn.functional.linear(x, self.weight)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(logits.dtype), experts


class SparseMoe(nn.Module):
    """Each row through its k experts, weighted. Rows are grouped by expert (one sort, one count read back);
    experts run in ascending order and add into the output in that order, as the reference accumulates."""

    def __init__(self, config: MoeDecoderConfig) -> None:
        super().__init__()
        self.gate = TopKRouter(config)
        self.experts = nn.ModuleList(SwiGLU(config.hidden_size, config.moe_intermediate_size)
                                     for _ in range(config.num_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, experts = self.gate(x)
        flat = experts.flatten()
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=len(self.experts)).tolist()
        rows, scales = order // experts.shape[1], weights.flatten()[order, None]
        out, start = torch.zeros_like(x), 0
        for expert, count in zip(self.experts, counts):
            if count:
                picked = rows[start : start + count]
                out.index_add_(0, picked, expert(x[picked]) * scales[start : start + count])
                start += count
        return out


class SharedExpertMoe(SparseMoe):
    """The talker's block: the routed experts plus a shared expert scaled by sigmoid(shared_expert_gate(x))."""

    def __init__(self, config: MoeDecoderConfig) -> None:
        super().__init__(config)
        self.shared_expert = SwiGLU(config.hidden_size, config.shared_expert_intermediate_size)
        self.shared_expert_gate = PackedLinear(config.hidden_size, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shared = self.shared_expert(x)
        return super().forward(x) + torch.sigmoid(self.shared_expert_gate(x)) * shared
