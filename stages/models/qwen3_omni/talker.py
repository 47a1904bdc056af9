"""Qwen3-Omni's talker over paged KV: code 0 of each codec frame from the MoE decoder (shared-expert blocks), the
other codes from its code predictor, and the projections that turn thinker rows into its inputs."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from stages.models.attention_batch import AttentionBatch
from stages.models.packed_linear import OutputHead, PackedLinear
from stages.models.qwen3_omni.code_predictor import Sampler, build_code_predictor, predict_residuals
from stages.models.qwen3_omni.config import MoeDecoderConfig, Qwen3OmniConfig, TalkerConfig
from stages.models.qwen3_omni.moe_decoder import MoeDecoderBody
from stages.models.qwen3_omni.weights import SafetensorsFolder, load_module

PREFIX = "talker."
THINKER_EMBEDDINGS = "thinker.model.embed_tokens.weight"


class TalkerBody(MoeDecoderBody):
    def __init__(self, config: MoeDecoderConfig) -> None:
        super().__init__(config)
        self.codec_embedding = nn.Embedding(config.vocab_size, config.hidden_size)


class ResizeMLP(nn.Module):
    """thinker width -> talker width: linear_fc2(silu(linear_fc1(x))), as Qwen3OmniMoeTalkerResizeMLP."""

    def __init__(self, in_size: int, intermediate_size: int, out_size: int) -> None:
        super().__init__()
        self.linear_fc1 = PackedLinear(in_size, intermediate_size, bias=True)
        self.linear_fc2 = PackedLinear(intermediate_size, out_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear_fc2(F.silu(self.linear_fc1(x)))


class TtsRows(NamedTuple):
    """The talker-width rows of the thinker's tts_bos, tts_eos and tts_pad tokens, [H] each."""

    bos: torch.Tensor
    eos: torch.Tensor
    pad: torch.Tensor


class Qwen3OmniTalker(nn.Module):
    """The talker as DecoderRunner drives it (`forward` as MoeDecoderBody.forward, `logits` = codec_head over
    code 0, `config.decoder` its sizes), and what its inputs are made of.

    `tts_rows` needs the thinker's embedding rows of the tts tokens (`tts_text_rows` [3, thinker hidden]:
    bos, eos, pad), which `from_folder` reads from the thinker's table; zeros otherwise.
    """

    def __init__(self, config: TalkerConfig, code_predictor: nn.Module | None = None) -> None:
        super().__init__()
        decoder = config.decoder
        self.config = config
        self.model = TalkerBody(decoder)
        self.codec_head = OutputHead(decoder.hidden_size, decoder.vocab_size, bias=False)
        if decoder.tie_word_embeddings:
            self.codec_head.weight = self.model.codec_embedding.weight
        self.text_projection = ResizeMLP(config.thinker_hidden_size, decoder.intermediate_size, decoder.hidden_size)
        self.hidden_projection = ResizeMLP(config.thinker_hidden_size, decoder.intermediate_size, decoder.hidden_size)
        self.code_predictor = code_predictor or build_code_predictor(config.code_predictor)
        self.register_buffer("tts_text_rows", torch.zeros(3, config.thinker_hidden_size), persistent=False)

    @classmethod
    def from_folder(cls, path: str | Path, device: str | torch.device = "cpu",
                    dtype: torch.dtype | None = None) -> Qwen3OmniTalker:
        """The talker of a Qwen3-Omni folder (`talker.*`, its code predictor included), loaded strictly, with
        the thinker's embedding rows of the tts tokens."""
        config = Qwen3OmniConfig.from_folder(path)
        code_predictor = build_code_predictor(config.talker.code_predictor)  # real buffers: not on meta
        with torch.device("meta"):
            talker = cls(config.talker, code_predictor)
        folder, tokens = SafetensorsFolder(path), config.tokens
        talker.tts_text_rows = folder.read_rows(THINKER_EMBEDDINGS, [
            tokens.tts_bos_token_id, tokens.tts_eos_token_id, tokens.tts_pad_token_id])
        load_module(talker, folder, PREFIX, device=device, dtype=dtype)
        return talker.eval()

    @property
    def codec_embedding(self) -> nn.Embedding:
        return self.model.codec_embedding

    def forward(self, embeds: torch.Tensor, positions: torch.Tensor, kv_layers: list, batch: AttentionBatch,
                capture_layer: int | None = None):
        return self.model(embeds, positions, kv_layers, batch, capture_layer)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.codec_head(hidden)

    def project_text(self, rows: torch.Tensor) -> torch.Tensor:
        """Thinker input embeddings (text) -> talker inputs."""
        return self.text_projection(rows)

    def project_hidden(self, rows: torch.Tensor) -> torch.Tensor:
        """Thinker hidden states (the accept layer's, over audio) -> talker inputs."""
        return self.hidden_projection(rows)

    def tts_rows(self) -> TtsRows:
        """tts_bos, tts_eos, tts_pad as the reference's generate makes them: text_projection of their thinker
        embedding rows (projected together)."""
        return TtsRows(*self.project_text(self.tts_text_rows))

    def codec_rows(self, ids: list[int] | torch.Tensor) -> torch.Tensor:
        """Codec embeddings of (special) codec ids -> [len(ids), H]."""
        return self.codec_embedding(torch.as_tensor(ids, device=self.codec_embedding.weight.device))

    def frame_embedding(self, codes: torch.Tensor) -> torch.Tensor:
        """codes [B, G] -> the next talker input's codec part [B, H]: the talker's codec_embedding of code 0
        plus the code predictor's codec_embedding[i-1] of code i, summed over the G rows as the reference does."""
        tables = self.code_predictor.get_input_embeddings()
        rows = [self.codec_embedding(codes[:, 0])]
        rows += [tables[i - 1](codes[:, i]) for i in range(1, codes.shape[1])]
        return torch.stack(rows, dim=1).sum(dim=1)

    def predict_residuals(self, past_hidden: torch.Tensor, code0: torch.Tensor,
                          sample: Sampler | None = None) -> torch.Tensor:
        """Codes 1..G-1 of each row's frame (see code_predictor.predict_residuals): past_hidden [B, H] the
        talker's final-normed hidden that gave code 0, code0 [B] -> LongTensor [B, G-1]."""
        return predict_residuals(self.code_predictor, past_hidden, self.codec_embedding(code0),
                                 self.config.num_code_groups, sample)
