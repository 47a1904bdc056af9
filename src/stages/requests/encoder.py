"""A turn's audio on its way through the encoder, in independent chunks."""

from __future__ import annotations

import torch

from stages.requests.base import StageRequest


class EncoderRequest(StageRequest):
    """16 kHz audio that streams in; positions are 12.5 Hz encoder frames.

    Chunks of `chunk_frames` frames are encoded independently, so a chunk is
    schedulable once complete (or once the input is closed, for the last partial one),
    and a round takes whole chunks only.
    """

    def __init__(self, request_id: str, arrival_time: float, chunk_frames: int, samples_per_frame: int) -> None:
        super().__init__(request_id, arrival_time)
        self.chunk_frames = chunk_frames
        self.samples_per_frame = samples_per_frame
        self.audio = torch.zeros(0)
        self.is_closed = False

    @property
    def num_known(self) -> int:
        whole = len(self.audio) // self.samples_per_frame
        if not self.is_closed:
            return whole - whole % self.chunk_frames
        return -(-len(self.audio) // self.samples_per_frame)

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
        return result

    def chunks(self, start: int, end: int) -> list[torch.Tensor]:
        """Audio of the chunks covering frames [start, end) (start is chunk-aligned)."""
        step = self.chunk_frames * self.samples_per_frame
        lo, hi = start * self.samples_per_frame, min(end * self.samples_per_frame, len(self.audio))
        return [self.audio[s : min(s + step, hi)] for s in range(lo, hi, step)]
