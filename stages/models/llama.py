"""A Llama-style decoder over paged KV (parameter names follow HF Llama checkpoints)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from stages.models.attention import paged_attention
from stages.models.attention_batch import AttentionBatch
from stages.models.decoder_config import DecoderConfig
from stages.models.history import HISTORY_SEED_OFFSET, SSMHistory
from stages.models.kernels.layer_ops import TORCH_OPS, LayerOps
from stages.models.packed_linear import FusedLinears, OutputHead, PackedLinear
from stages.models.weights import INIT_STD, load_checkpoint, tensor_shapes


class RMSNorm(nn.Module):
    ops: LayerOps = TORCH_OPS

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ops.rms_norm(x, self.weight, self.eps)


class RotaryEmbedding:
    """Precomputed cos/sin tables of `max_position` rows; `tables` gives the rows' angles that `LayerOps.rotate` takes.

    Positions beyond the tables (a windowed stream's keep counting past the model's maximum) are
    computed when asked for, not added to the tables, so memory stays bounded however long a stream runs.
    The tables move to the device of the positions asked for (once), and stay float32 there.
    """

    def __init__(self, head_dim: int, max_position: int, theta: float) -> None:
        self.inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        self.cos, self.sin = self._rows(0, max_position)

    def _rows(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
        angles = torch.outer(torch.arange(start, stop, dtype=torch.float64), self.inv_freq)
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().float(), angles.sin().float()

    def tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cos.device != positions.device:
            self.inv_freq, self.cos, self.sin = (t.to(positions.device) for t in (self.inv_freq, self.cos, self.sin))
        if len(positions) and int(positions.max()) >= len(self.cos):  # past the tables: computed for these only
            angles = torch.outer(positions.to(torch.float64), self.inv_freq)
            angles = torch.cat([angles, angles], dim=-1)
            return angles.cos().float()[:, None, :], angles.sin().float()[:, None, :]
        return self.cos[positions][:, None, :], self.sin[positions][:, None, :]


class Attention(nn.Module):
    ops: LayerOps = TORCH_OPS

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_heads, config.num_kv_heads, config.head_dim
        self.q_proj = PackedLinear(config.hidden_size, config.num_heads * config.head_dim, bias=False)
        self.k_proj = PackedLinear(config.hidden_size, config.num_kv_heads * config.head_dim, bias=False)
        self.v_proj = PackedLinear(config.hidden_size, config.num_kv_heads * config.head_dim, bias=False)
        self.o_proj = PackedLinear(config.num_heads * config.head_dim, config.hidden_size, bias=False)
        self.qkv = FusedLinears(self.q_proj, self.k_proj, self.v_proj)
        self.history: SSMHistory | None = None  # see add_history

    def forward(self, x, rope: tuple[torch.Tensor, torch.Tensor], kv: tuple[torch.Tensor, torch.Tensor], batch: AttentionBatch):
        rows = x.shape[0]
        q, k, v = self.qkv(x)
        q = q.reshape(rows, self.num_heads, self.head_dim)
        k = k.reshape(rows, self.num_kv_heads, self.head_dim)
        v = v.reshape(rows, self.num_kv_heads, self.head_dim)
        q, k = self.ops.rotate(q, *rope), self.ops.rotate(k, *rope)
        attended = paged_attention(q, k, v, kv[0], kv[1], batch)
        if self.history is not None and batch.history is not None:
            read = self.history(x, kv[0], kv[1], batch.history).view(-1, self.num_kv_heads, 1, self.head_dim)
            grouped = attended.view(rows, self.num_kv_heads, -1, self.head_dim)
            grouped.index_add_(0, batch.history.rows, read.expand(-1, -1, grouped.shape[2], -1))
        return self.o_proj(attended.reshape(rows, -1))


class MLP(nn.Module):
    ops: LayerOps = TORCH_OPS

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = PackedLinear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = PackedLinear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = PackedLinear(config.intermediate_size, config.hidden_size, bias=False)
        self.gate_up = FusedLinears(self.gate_proj, self.up_proj)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x)
        return self.down_proj(self.ops.silu_mul(gate, up))


class DecoderLayer(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config)

    def forward(self, x, rope, kv, batch: AttentionBatch) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, kv, batch)
        return x + self.mlp(self.post_attention_layernorm(x))


def add_history(model: nn.Module, seed: int, checkpoint: str | Path | None = None) -> None:
    """Give every attention layer of `model` a history branch (SSMHistory): the checkpoint's tensors
    (`...self_attn.history.*`) when it has any, all of them; else seeded from `seed` (apart from the model's
    own weights, which stay as they are)."""
    generator = torch.Generator().manual_seed(seed + HISTORY_SEED_OFFSET)
    for module in model.modules():
        if isinstance(module, Attention):
            hidden = module.q_proj.weight.shape[1]
            module.history = SSMHistory(hidden, module.num_kv_heads * module.head_dim)
            module.history.seed(generator, INIT_STD)
    if checkpoint is not None and tensor_shapes(checkpoint, is_history_name):
        load_checkpoint(model, checkpoint, part=is_history_name)


def is_history_name(name: str) -> bool:
    return ".history." in name


def use_layer_ops(model: nn.Module, ops: LayerOps) -> None:
    """Every decoder layer in `model` computes its element-wise steps with `ops` from now on."""
    for module in model.modules():
        if isinstance(module, (RMSNorm, Attention, MLP)):
            module.ops = ops


class DecoderBody(nn.Module):
    """Embeddings in, final-normed hidden states out; KV read and written through the cache."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config.head_dim, config.max_position, config.rope_theta)

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, kv_layers: list, batch: AttentionBatch) -> torch.Tensor:
        rope = tuple(table.to(embeds.dtype) for table in self.rotary.tables(positions))
        x = embeds
        for layer, kv in zip(self.layers, kv_layers):
            x = layer(x, rope, kv, batch)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    """The thinker: a decoder body and an LM head (tied to the embeddings by default)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderBody(config)
        self.lm_head = OutputHead(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def embed(self) -> nn.Embedding:
        return self.model.embed_tokens

    def forward(self, embeds, positions, kv_layers, batch: AttentionBatch) -> torch.Tensor:
        return self.model(embeds, positions, kv_layers, batch)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
