"""Chunked audio encoder: 16 kHz audio -> 12.5 Hz embeddings in the thinker's hidden size."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from stages.validation import require_positive_ints

from stages.models.mel import HOP_LENGTH, SAMPLE_RATE, log_mel

MEL_FRAMES_PER_FRAME = 8  # three stride-2 convolutions


@dataclass(frozen=True)
class AudioEncoderConfig:
    """Sizes of the encoder. One output frame covers 1280 samples (80 ms); a chunk is
    `chunk_frames` output frames, and chunks are encoded independently of each other."""

    sample_rate: int = SAMPLE_RATE
    n_mels: int = 80
    hidden_size: int = 256
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 1024
    chunk_frames: int = 25
    output_size: int = 384

    def __post_init__(self) -> None:
        require_positive_ints(self, *(field.name for field in fields(self)))
        if self.sample_rate != SAMPLE_RATE:
            raise ValueError(f"sample_rate ({self.sample_rate}) must be {SAMPLE_RATE}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be divisible by num_heads ({self.num_heads})")
        if self.hidden_size % 2:
            raise ValueError(f"hidden_size ({self.hidden_size}) must be even (sinusoidal positions)")

    @property
    def samples_per_frame(self) -> int:
        return MEL_FRAMES_PER_FRAME * HOP_LENGTH

    @property
    def chunk_samples(self) -> int:
        return self.chunk_frames * self.samples_per_frame


class AudioEncoder(nn.Module):
    """16 kHz audio -> [ceil(T/1280), output_size] embeddings (12.5 Hz).

    Contract: audio is cut into chunks of `config.chunk_samples` (the last may be
    shorter) and each chunk is encoded on its own: log-mel, three stride-2 convs,
    sinusoidal positions from 0, bidirectional attention within the chunk only. A
    chunk of S > 0 samples yields exactly ceil(S/1280) frames that depend on nothing
    but its own samples, so encoding streams chunk by chunk, and chunks of any
    sessions batch together; the padding used for batching never changes them.
    """

    def __init__(self, config: AudioEncoderConfig = AudioEncoderConfig()) -> None:
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.convs = nn.ModuleList(
            nn.Conv1d(n_in, hidden, kernel_size=3, stride=2, padding=1) for n_in in (config.n_mels, hidden, hidden)
        )
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.num_layers))
        self.final_norm = nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, config.output_size)
        self.register_buffer("positions", _sinusoids(config.chunk_frames, hidden), persistent=False)

    def num_output_frames(self, num_samples: int) -> int:
        return -(-num_samples // self.config.samples_per_frame)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """[T] audio -> [num_output_frames(T), output_size]: its chunks' outputs, concatenated."""
        if audio.dim() != 1:
            raise ValueError(f"audio must be 1-D, got shape {tuple(audio.shape)}")
        return torch.cat(self.encode_chunks(list(audio.split(self.config.chunk_samples))))

    def encode_chunks(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        """Encode chunks (each 1-D, at most chunk_samples) as one batch -> [ceil(S_i/1280), output_size] each."""
        for i, chunk in enumerate(chunks):
            self._check_chunk(i, chunk)
        filled = [i for i, chunk in enumerate(chunks) if chunk.numel()]
        encoded = dict(zip(filled, self._encode_batch([chunks[i] for i in filled]))) if filled else {}
        return [encoded[i] if i in encoded else self._no_frames() for i in range(len(chunks))]

    def _encode_batch(self, chunks: list[torch.Tensor]) -> list[torch.Tensor]:
        x, lengths = self._downsample(chunks)
        valid = _valid(lengths, x.shape[1])
        attn_mask = None if bool(valid.all()) else valid[:, None, None, :]
        x = x + self.positions[: x.shape[1]]
        for layer in self.layers:
            x = layer(x, attn_mask)
        x = self.proj(self.final_norm(x))
        return [x[i, :n] for i, n in enumerate(lengths.tolist())]

    def _downsample(self, chunks: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Chunks -> ([B, frames, hidden] at 12.5 Hz, valid frames per chunk); padding is zero at each conv input."""
        device, dtype = self.positions.device, self.positions.dtype
        mels = [log_mel(chunk.to(device), self.config.n_mels).to(dtype) for chunk in chunks]
        lengths = torch.tensor([mel.shape[0] for mel in mels], device=device)
        x = pad_sequence(mels, batch_first=True).transpose(1, 2)
        for conv in self.convs:
            x = F.gelu(conv(x))
            lengths = (lengths + 1) // 2
            x = x * _valid(lengths, x.shape[-1])[:, None, :]
        return x.transpose(1, 2), lengths

    def _check_chunk(self, index: int, chunk: torch.Tensor) -> None:
        if chunk.dim() != 1:
            raise ValueError(f"chunk {index} must be 1-D, got shape {tuple(chunk.shape)}")
        if chunk.numel() > self.config.chunk_samples:
            limit = self.config.chunk_samples
            raise ValueError(f"chunk {index} has {chunk.numel()} samples, more than chunk_samples ({limit})")

    def _no_frames(self) -> torch.Tensor:
        return self.positions.new_zeros(0, self.config.output_size)


class EncoderLayer(nn.Module):
    """Pre-LN transformer layer; attention is bidirectional over the valid frames of a chunk."""

    def __init__(self, config: AudioEncoderConfig) -> None:
        super().__init__()
        hidden = config.hidden_size
        self.num_heads = config.num_heads
        self.attn_norm = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out_proj = nn.Linear(hidden, hidden)
        self.mlp_norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, config.intermediate_size)
        self.fc2 = nn.Linear(config.intermediate_size, hidden)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        x = x + self._attention(self.attn_norm(x), attn_mask)
        return x + self.fc2(F.gelu(self.fc1(self.mlp_norm(x))))

    def _attention(self, x: torch.Tensor, attn_mask: torch.Tensor | None) -> torch.Tensor:
        batch, frames, hidden = x.shape
        q, k, v = self.qkv(x).view(batch, frames, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.out_proj(out.transpose(1, 2).reshape(batch, frames, hidden))


def _valid(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """[B, width] bool: True where a position is inside its row's length."""
    return torch.arange(width, device=lengths.device)[None, :] < lengths[:, None]


def _sinusoids(length: int, channels: int) -> torch.Tensor:
    """Whisper's [length, channels] sinusoidal positions: sines in the first half, cosines in the second."""
    half = channels // 2
    inv_timescales = torch.exp(-math.log(10000) / max(half - 1, 1) * torch.arange(half))
    angles = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=1)
