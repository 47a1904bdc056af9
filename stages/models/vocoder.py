"""Causal convolutional vocoder: codec frame ids -> 24 kHz PCM, decodable in chunks."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pad_sequence

from stages.validation import require_positive_ints


@dataclass(frozen=True)
class VocoderConfig:
    """Sizes of the vocoder. Frame layer i is a causal conv with dilation 2**i; each
    frame is upsampled (Linear, GELU) to `samples_per_frame` samples in `sample_channels` channels,
    mixed down to one by a causal conv of `sample_kernel` samples, which reaches at
    most one frame back."""

    codec_vocab_size: int = 1024
    sample_rate: int = 24000
    samples_per_frame: int = 1920
    hidden_size: int = 128
    num_frame_layers: int = 3
    frame_kernel: int = 3
    sample_kernel: int = 9
    sample_channels: int = 4

    def __post_init__(self) -> None:
        require_positive_ints(self, *(field.name for field in fields(self)))
        if self.sample_kernel > self.samples_per_frame + 1:
            limit = self.samples_per_frame + 1
            raise ValueError(f"sample_kernel ({self.sample_kernel}) must be at most samples_per_frame + 1 ({limit})")

    @property
    def frame_receptive_field(self) -> int:
        """How many earlier frames one frame's features depend on."""
        return (self.frame_kernel - 1) * (2**self.num_frame_layers - 1)

    @property
    def sample_context_frames(self) -> int:
        """Earlier frames whose samples the sample-level conv reaches into (0 or 1)."""
        return int(self.sample_kernel > 1)

    @property
    def left_context_frames(self) -> int:
        """Earlier frames a chunk needs so that chunked output equals whole-sequence output."""
        return self.frame_receptive_field + self.sample_context_frames


class Vocoder(nn.Module):
    """Codec frame ids -> PCM in [-1, 1], `samples_per_frame` samples per frame.

    Contract: strictly causal, so the samples of frame j depend only on frames <= j
    and appending frames never changes samples already produced. A chunk decoded
    with `left_context_frames` frames of left context (or all frames since the start
    of the sequence, if fewer) yields the same samples as decoding the whole
    sequence; with less context its first samples differ.
    """

    def __init__(self, config: VocoderConfig = VocoderConfig()) -> None:
        super().__init__()
        self.config = config
        hidden = config.hidden_size
        self.embed = nn.Embedding(config.codec_vocab_size, hidden)
        self.frame_norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(config.num_frame_layers))
        self.frame_convs = nn.ModuleList(
            nn.Conv1d(hidden, hidden, config.frame_kernel, dilation=2**i) for i in range(config.num_frame_layers)
        )
        self.out_norm = nn.LayerNorm(hidden)
        self.upsample = nn.Linear(hidden, config.samples_per_frame * config.sample_channels)
        self.sample_conv = nn.Conv1d(config.sample_channels, 1, config.sample_kernel)

    @property
    def left_context_frames(self) -> int:
        return self.config.left_context_frames

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """[N] frame ids -> [N * samples_per_frame] samples."""
        return self.decode_chunk(frames, 0)

    def decode_chunk(self, frames: torch.Tensor, num_context: int) -> torch.Tensor:
        """[M] frame ids whose first num_context are left context -> samples of the other M - num_context."""
        return self.decode_chunks([(frames, num_context)])[0]

    def decode_chunks(self, chunks: list[tuple[torch.Tensor, int]]) -> list[torch.Tensor]:
        """`decode_chunk` of every (frames, num_context) pair, computed as one batch."""
        for i, (frames, num_context) in enumerate(chunks):
            self._check_chunk(i, frames, num_context)
        busy = [i for i, (frames, num_context) in enumerate(chunks) if len(frames) > num_context]
        decoded = dict(zip(busy, self._decode_batch([chunks[i] for i in busy]))) if busy else {}
        return [decoded[i] if i in decoded else self.upsample.weight.new_zeros(0) for i in range(len(chunks))]

    def _decode_batch(self, chunks: list[tuple[torch.Tensor, int]]) -> list[torch.Tensor]:
        starts = [max(num_context - self.config.sample_context_frames, 0) for _, num_context in chunks]
        upsampled = self._upsample_rows(chunks, starts)
        segments = self._segments(upsampled, *_new_frame_index(chunks, starts))
        samples = torch.tanh(_valid_conv_to_one_channel(segments, self.sample_conv)).view(-1)
        spf = self.config.samples_per_frame
        return list(samples.split([(len(frames) - num_context) * spf for frames, num_context in chunks]))

    def _upsample_rows(self, chunks: list[tuple[torch.Tensor, int]], starts: list[int]) -> torch.Tensor:
        """Frames `start:` of every chunk, upsampled -> [their number, sample_channels, samples_per_frame]."""
        device = self.upsample.weight.device
        ids = pad_sequence([frames.to(device) for frames, _ in chunks], batch_first=True)
        features = self._frame_features(ids)
        rows = [features[b, start : len(frames)] for b, ((frames, _), start) in enumerate(zip(chunks, starts))]
        upsampled = F.gelu(self.upsample(torch.cat(rows)))
        return upsampled.view(-1, self.config.sample_channels, self.config.samples_per_frame)

    def _segments(self, upsampled: torch.Tensor, new_index: torch.Tensor, at_start: torch.Tensor) -> torch.Tensor:
        """Each new frame's samples after the sample_kernel - 1 samples before them (zeros at a sequence start)."""
        reach = self.config.sample_kernel - 1
        new_index, at_start = new_index.to(upsampled.device), at_start.to(upsampled.device)
        previous_tails = upsampled[(new_index - 1).clamp(min=0), :, upsampled.shape[-1] - reach :]
        previous_tails[at_start] = 0.0
        return torch.cat([previous_tails, upsampled[new_index]], dim=-1)

    def _frame_features(self, ids: torch.Tensor) -> torch.Tensor:
        """[B, M] ids -> [B, M, hidden]: causal dilated convs with pre-norm residuals."""
        x = self.embed(ids)
        for norm, conv in zip(self.frame_norms, self.frame_convs):
            x = x + _causal_conv(F.gelu(norm(x)), conv)
        return self.out_norm(x)

    def _check_chunk(self, index: int, frames: torch.Tensor, num_context: int) -> None:
        if frames.dim() != 1 or frames.dtype.is_floating_point or frames.dtype == torch.bool:
            got = f"{frames.dtype} {tuple(frames.shape)}"
            raise ValueError(f"chunk {index}: frames must be a 1-D integer tensor, got {got}")
        if not 0 <= num_context <= len(frames):
            raise ValueError(f"chunk {index}: num_context ({num_context}) must be in [0, {len(frames)}]")
        if len(frames) and not 0 <= int(frames.min()) <= int(frames.max()) < self.config.codec_vocab_size:
            raise ValueError(f"chunk {index}: frame ids must be in [0, {self.config.codec_vocab_size})")


def _causal_conv(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """`conv` over [B, M, channels], left-padded, as one matmul over stacked taps
    (torch's own dilated conv is several times slower on CPU)."""
    dilation, kernel, length = conv.dilation[0], conv.kernel_size[0], x.shape[1]
    padded = F.pad(x, (0, 0, dilation * (kernel - 1), 0))
    taps = torch.cat([padded[:, j * dilation : j * dilation + length] for j in range(kernel)], dim=-1)
    return F.linear(taps, conv.weight.permute(0, 2, 1).reshape(conv.out_channels, -1), conv.bias)


def _valid_conv_to_one_channel(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """`conv` (channels -> 1, no padding) over [N, channels, T] -> [N, T - kernel + 1]: one channel
    mix per tap, then shifted sums (2-3x faster than oneDNN's conv with one output channel)."""
    kernel = conv.kernel_size[0]
    length = x.shape[-1] - kernel + 1
    taps = torch.bmm(conv.weight[0].T.expand(len(x), -1, -1), x)  # matmul would fold into a slow [N*T, C] mm
    out = taps[:, 0, :length] + conv.bias
    for k in range(1, kernel):
        out += taps[:, k, k : k + length]
    return out


def _new_frame_index(
    chunks: list[tuple[torch.Tensor, int]], starts: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat indices of the new frames among the upsampled rows, and which of them start their sequence."""
    index, at_sequence_start, offset = [], [], 0
    for (frames, num_context), start in zip(chunks, starts):
        index.extend(range(offset + num_context - start, offset + len(frames) - start))
        at_sequence_start.extend(i == 0 for i in range(num_context, len(frames)))
        offset += len(frames) - start
    return torch.tensor(index), torch.tensor(at_sequence_start)
