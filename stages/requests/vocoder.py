"""A turn's codec frames on their way to audio."""

from __future__ import annotations

import torch

from stages.requests.base import StageRequest


class VocoderRequest(StageRequest):
    """Codec frames stream in (a code each, or a list of codes, one per codebook); each computed frame yields
    its samples of PCM.

    A chunk is decoded together with up to `left_context` earlier frames so that
    chunked output equals whole-sequence output. Each frame is `frame_ms` of audio (`audio_ms`).
    """

    def __init__(self, request_id: str, arrival_time: float, left_context: int, frame_ms: float) -> None:
        super().__init__(request_id, arrival_time)
        self.left_context = left_context
        self.frame_ms = frame_ms
        self.frames: list[int | list[int]] = []
        self.is_closed = False

    @property
    def num_known(self) -> int:
        return len(self.frames)

    @property
    def is_finished(self) -> bool:
        return self.is_closed and self.num_computed >= len(self.frames)

    def append(self, data: list | None, close: bool = False) -> None:
        if data is not None:
            self.frames.extend(data)
        self.is_closed = self.is_closed or close

    def advance(self, num_tokens: int, result: torch.Tensor) -> torch.Tensor:
        self.num_computed += num_tokens
        self.audio_ms += num_tokens * self.frame_ms
        return result

    def chunk(self, start: int, end: int) -> tuple[torch.Tensor, int]:
        """Frames [start - context, end) ([frames] or [frames, codebooks]) and how many of them are context."""
        lo = max(0, start - self.left_context)
        return torch.tensor(self.frames[lo:end], dtype=torch.long), start - lo
