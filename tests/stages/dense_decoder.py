"""A cache-free reference of the Llama decoder body, for tests of paged (and windowed) attention."""

from __future__ import annotations

import math

import torch

from stages.models.kernels.layer_ops import TORCH_OPS as ops
from stages.models.llama import DecoderBody, RMSNorm


def dense_hidden(body: DecoderBody, embeds: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The decoder without any cache: every position attends where `mask` [n, n] is True (default: causal).
    Element-wise steps in torch ops, whichever ops the body's layers were given."""
    n = embeds.shape[0]
    cos, sin = body.rotary.tables(torch.arange(n))
    mask = torch.ones(n, n, dtype=torch.bool).tril() if mask is None else mask
    x = embeds
    for layer in body.layers:
        attn, h = layer.self_attn, _norm(layer.input_layernorm, x)
        q = ops.rotate(attn.q_proj(h).view(n, attn.num_heads, attn.head_dim), cos, sin)
        k = ops.rotate(attn.k_proj(h).view(n, attn.num_kv_heads, attn.head_dim), cos, sin)
        v = attn.v_proj(h).view(n, attn.num_kv_heads, attn.head_dim)
        group = attn.num_heads // attn.num_kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(attn.head_dim)
        mixed = torch.einsum("hqk,khd->qhd", scores.masked_fill(~mask, float("-inf")).softmax(-1), v)
        x = x + attn.o_proj(mixed.reshape(n, -1))
        h, mlp = _norm(layer.post_attention_layernorm, x), layer.mlp
        x = x + mlp.down_proj(ops.silu_mul(mlp.gate_proj(h), mlp.up_proj(h)))
    return _norm(body.norm, x)


def _norm(norm: RMSNorm, x: torch.Tensor) -> torch.Tensor:
    return ops.rms_norm(x, norm.weight, norm.eps)
