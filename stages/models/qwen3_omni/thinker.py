"""Qwen3-Omni's thinker (its text decoder) over paged KV: embeddings, the MoE decoder body and the LM head."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from stages.models.attention_batch import AttentionBatch
from stages.models.packed_linear import OutputHead
from stages.models.qwen3_omni.config import MoeDecoderConfig, Qwen3OmniConfig
from stages.models.qwen3_omni.moe_decoder import MoeDecoderBody
from stages.models.qwen3_omni.weights import SafetensorsFolder, load_module

PREFIX = "thinker."
ENCODERS = ("audio_tower.", "visual.")  # under the thinker's prefix, loaded by their own stages (or not at all)


class ThinkerBody(MoeDecoderBody):
    def __init__(self, config: MoeDecoderConfig) -> None:
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)


class Qwen3OmniThinker(nn.Module):
    """What DecoderRunner drives: `embed`, `forward(embeds, positions, kv_layers, batch, capture_layer=None)`
    (see MoeDecoderBody.forward), `logits`, and `config` (its decoder's sizes)."""

    def __init__(self, config: MoeDecoderConfig) -> None:
        super().__init__()
        self.config = config
        self.model = ThinkerBody(config)
        self.lm_head = OutputHead(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @classmethod
    def from_folder(cls, path: str | Path, device: str | torch.device = "cpu",
                    dtype: torch.dtype | None = None) -> Qwen3OmniThinker:
        """The thinker of a Qwen3-Omni folder (`thinker.model.*`, `thinker.lm_head.*`), loaded strictly."""
        with torch.device("meta"):
            thinker = cls(Qwen3OmniConfig.from_folder(path).thinker)
        skip = tuple(PREFIX + name for name in ENCODERS)
        load_module(thinker, SafetensorsFolder(path), PREFIX, skip=skip, device=device, dtype=dtype)
        return thinker.eval()

    @property
    def embed(self) -> nn.Embedding:
        return self.model.embed_tokens

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, kv_layers: list, batch: AttentionBatch,
                capture_layer: int | None = None):
        return self.model(embeds, positions, kv_layers, batch, capture_layer)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)
