"""The decoder body the thinker and the talker share: llama's layer shape with q/k-normed attention over paged KV
and MoE feed-forward blocks (moe.py), parameter names as in the original checkpoints."""

from __future__ import annotations

import torch
from torch import nn

from stages.models.attention import paged_attention
from stages.models.attention_batch import AttentionBatch
from stages.models.llama import Attention, RMSNorm
from stages.models.qwen3_omni.config import MoeDecoderConfig
from stages.models.qwen3_omni.moe import SharedExpertMoe, SparseMoe, SwiGLU


class RotaryAngles:
    """cos/sin of each position's angles, computed as transformers computes Qwen3-Omni's: inv_freq =
    1 / theta ** (arange(0, dim, 2) / dim) and angles = position * inv_freq, both in float32 (inv_freq on the
    CPU, as the reference builds it). Positions here are the same in all three multimodal-RoPE sections
    (text and audio only), where interleaved multimodal RoPE is ordinary rotate-half RoPE."""

    def __init__(self, head_dim: int, theta: float) -> None:
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu") / head_dim))

    def tables(self, positions: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(cos, sin), each [rows, 1, head_dim], computed in float32 and then cast, as the reference does, to
        the device and dtype of `like` (the hidden states)."""
        if self.inv_freq.device != like.device:
            self.inv_freq = self.inv_freq.to(like.device)
        angles = positions.to(device=like.device, dtype=torch.float32)[:, None] * self.inv_freq
        angles = torch.cat([angles, angles], dim=-1)[:, None, :]
        return angles.cos().to(like.dtype), angles.sin().to(like.dtype)


class NormedAttention(Attention):
    """llama's attention with an RMS norm over each head of q and k before the rotation (Qwen3)."""

    def __init__(self, config: MoeDecoderConfig) -> None:
        super().__init__(config)
        self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)

    def forward(self, x, rope: tuple[torch.Tensor, torch.Tensor], kv: tuple[torch.Tensor, torch.Tensor],
                batch: AttentionBatch) -> torch.Tensor:
        rows = x.shape[0]
        q, k, v = self.qkv(x)
        q = self.q_norm(q.reshape(rows, self.num_heads, self.head_dim))
        k = self.k_norm(k.reshape(rows, self.num_kv_heads, self.head_dim))
        v = v.reshape(rows, self.num_kv_heads, self.head_dim)
        q, k = self.ops.rotate(q, *rope), self.ops.rotate(k, *rope)
        return self.o_proj(paged_attention(q, k, v, kv[0], kv[1], batch).reshape(rows, -1))


def feed_forward(config: MoeDecoderConfig, layer: int) -> nn.Module:
    """Layer `layer`'s block: the talker's shared-expert MoE, a sparse MoE, or a dense SwiGLU (see is_sparse)."""
    if not config.is_sparse(layer):
        return SwiGLU(config.hidden_size, config.intermediate_size)
    return SparseMoe(config) if config.shared_expert_intermediate_size is None else SharedExpertMoe(config)


class MoeDecoderLayer(nn.Module):
    def __init__(self, config: MoeDecoderConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = NormedAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = feed_forward(config, layer)

    def forward(self, x, rope, kv, batch: AttentionBatch) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, kv, batch)
        return x + self.mlp(self.post_attention_layernorm(x))


class MoeDecoderBody(nn.Module):
    """Embeddings in, final-normed hidden states out; KV read and written through the paged cache.
    Subclasses add their input embedding table under its checkpoint name."""

    def __init__(self, config: MoeDecoderConfig) -> None:
        super().__init__()
        self.num_layers = config.num_layers
        self.layers = nn.ModuleList(MoeDecoderLayer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryAngles(config.head_dim, config.rope_theta)

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, kv_layers: list, batch: AttentionBatch,
                capture_layer: int | None = None):
        """embeds [rows, hidden] at `positions` [rows] -> the final-normed hidden [rows, hidden]; with
        `capture_layer` k, the pair (final-normed hidden, hidden after k layers) as the reference's
        hidden_states[k]: k = 0 the embeddings, k = num_layers the final-normed hidden."""
        if capture_layer is not None and not 0 <= capture_layer <= self.num_layers:
            raise ValueError(f"capture_layer must be in [0, {self.num_layers}], got {capture_layer}")
        rope = self.rotary.tables(positions, embeds)
        x, captured = embeds, embeds
        for index, (layer, kv) in enumerate(zip(self.layers, kv_layers), start=1):
            x = layer(x, rope, kv, batch)
            if index == capture_layer:
                captured = x
        hidden = self.norm(x)
        if capture_layer is None:
            return hidden
        return hidden, hidden if capture_layer == self.num_layers else captured
