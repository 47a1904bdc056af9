"""A turn's audio on its way through the encoder, in independent chunks."""

from __future__ import annotations

import torch

from stages.requests.base import StageRequest


class EncoderRequest(StageRequest):
    """16 kHz audio that streams in; positions are 12.5 Hz encoder frames.

    Chunks of `chunk_frames` frames are encoded independently, so a chunk is
    schedulable once complete (or once the input is closed, for the last partial one),
    and a round takes whole chunks only. Audio already encoded is let go, so a stream
    of any length holds only what is still to encode.
    """

    def __init__(self, request_id: str, arrival_time: float, chunk_frames: int, samples_per_frame: int) -> None:
        super().__init__(request_id, arrival_time)
        self.chunk_frames = chunk_frames
        self.samples_per_frame = samples_per_frame
        self.audio = torch.zeros(0)  # samples from `self.base` on
        self.base = 0
        self.is_closed = False

    @property
    def num_known(self) -> int:
        received = self.base + len(self.audio)
        whole = received // self.samples_per_frame
        if not self.is_closed:
            return whole - whole % self.chunk_frames
        return -(-received // self.samples_per_frame)

    @property
    def is_finished(self) -> bool:
        return self.is_closed and self.num_computed >= self.num_known

    def num_schedulable(self, budget: int) -> int:
        pending = self.num_pending
        if pending <= budget:
            return pending
        return budget - budget % self.chunk_frames

    def append(self, data: torch.Tensor | None, close: bool = False) -> None:
        if data is not None:
            self.audio = torch.cat([self.audio, data.to(torch.float32).reshape(-1)])
        self.is_closed = self.is_closed or close

    def advance(self, num_tokens: int, result: torch.Tensor) -> torch.Tensor:
        self.num_computed += num_tokens
        done = min(self.num_computed * self.samples_per_frame - self.base, len(self.audio))
        self.audio, self.base = self.audio[done:], self.base + done
        return result

    def chunks(self, start: int, end: int) -> list[torch.Tensor]:
        """Audio of the chunks covering frames [start, end) (start is chunk-aligned)."""
        step = self.chunk_frames * self.samples_per_frame
        lo = start * self.samples_per_frame - self.base
        hi = min(end * self.samples_per_frame - self.base, len(self.audio))
        return [self.audio[s : min(s + step, hi)] for s in range(lo, hi, step)]
