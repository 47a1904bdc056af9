"""A turn's talker work: codec frames generated from streamed thinker hidden states."""

from __future__ import annotations

import torch

from stages.config import SamplingParams
from stages.requests.base import StageRequest


class TalkerRequest(StageRequest):
    """Position k takes (frame k-1, or BOS at k = 0) and condition k // frames_per_token.

    Conditions (thinker hidden states, one per spoken text token) stream in; position
    k is known once frame k-1 is sampled and its condition has arrived. Computing the
    newest position samples the next frame. Finished when closed and every condition
    has produced its `frames_per_token` frames.
    """

    def __init__(
        self, request_id: str, arrival_time: float, frames_per_token: int, sampling: SamplingParams, bos_id: int
    ) -> None:
        super().__init__(request_id, arrival_time)
        self.frames_per_token = frames_per_token
        self.sampling = sampling
        self.generator = torch.Generator().manual_seed(sampling.seed)
        self.bos_id = bos_id
        self.conds: list[torch.Tensor] = []
        self.frames: list[int] = []
        self.is_closed = False

    @property
    def num_target_frames(self) -> int:
        return self.frames_per_token * len(self.conds)

    @property
    def num_known(self) -> int:
        return min(len(self.frames) + 1, self.num_target_frames)

    @property
    def is_finished(self) -> bool:
        return self.is_closed and len(self.frames) >= self.num_target_frames

    def wants_sample(self, end: int) -> bool:
        return end == len(self.frames) + 1

    def append(self, data: torch.Tensor | None, close: bool = False) -> None:
        if data is not None:
            self.conds.extend(data.reshape(-1, data.shape[-1]))
        self.is_closed = self.is_closed or close

    def advance(self, num_tokens: int, result: int | None) -> int | None:
        self.num_computed += num_tokens
        if result is not None:
            self.frames.append(result)
        return result

    def inputs(self, start: int, end: int) -> tuple[list[int], torch.Tensor]:
        """Previous-frame ids and condition rows for positions [start, end)."""
        prev = [self.frames[k - 1] if k > 0 else self.bos_id for k in range(start, end)]
        conds = torch.stack([self.conds[k // self.frames_per_token] for k in range(start, end)])
        return prev, conds
