"""The talker: codec frames from the previous frame and the thinker's hidden state."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from stages.models.attention_batch import AttentionBatch
from stages.models.decoder_config import DecoderConfig
from stages.models.packed_linear import OutputHead, PackedLinear
from stages.validation import require_positive_ints
from stages.models.llama import DecoderBody


@dataclass(frozen=True)
class TalkerConfig:
    """A decoder over `codec_vocab_size` codec ids (+ BOS), conditioned per text token."""

    decoder: DecoderConfig
    codec_vocab_size: int
    thinker_hidden_size: int
    frames_per_token: int = 3

    def __post_init__(self) -> None:
        require_positive_ints(self, "codec_vocab_size", "thinker_hidden_size", "frames_per_token")
        if self.decoder.vocab_size != self.codec_vocab_size + 1:
            raise ValueError("the talker decoder's vocab_size must be codec_vocab_size + 1 (BOS)")

    @property
    def bos_id(self) -> int:
        return self.codec_vocab_size


class TalkerModel(nn.Module):
    """Input at position k: embed(frame k-1) + proj(condition); output: logits over codec ids."""

    def __init__(self, config: TalkerConfig) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderBody(config.decoder)
        self.cond_proj = PackedLinear(config.thinker_hidden_size, config.decoder.hidden_size, bias=False)
        self.codec_head = OutputHead(config.decoder.hidden_size, config.codec_vocab_size, bias=False)

    def input_embeddings(self, prev_frames: list[int], conds: torch.Tensor) -> torch.Tensor:
        weight = self.cond_proj.weight
        frames = torch.tensor(prev_frames, dtype=torch.long, device=weight.device)
        return self.model.embed_tokens(frames) + self.cond_proj(conds.to(weight.device, weight.dtype))

    def forward(self, embeds, positions, kv_layers, batch: AttentionBatch) -> torch.Tensor:
        return self.model(embeds, positions, kv_layers, batch)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.codec_head(hidden)
