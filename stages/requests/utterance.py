"""A user's utterance at an encoder that encodes it whole (Qwen3-Omni's audio encoder)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from stages.requests.base import StageRequest


class UtteranceRequest(StageRequest):
    """16 kHz audio that streams in and is encoded in one step once closed: the encoder's features are
    normalized over the whole utterance, so no part of it can be encoded before the rest has arrived.
    Its positions are the rows the encoder gives `num_rows(num_samples)`; a round takes all or none, so an
    utterance of more than `max_rows` rows (the stage's max_num_batched_tokens) is refused when it closes: a
    ValueError says so, and the request ends without encoding it."""

    def __init__(self, request_id: str, arrival_time: float, num_rows: Callable[[int], int], max_rows: int) -> None:
        super().__init__(request_id, arrival_time)
        self.num_rows, self.max_rows = num_rows, max_rows
        self.parts: list[torch.Tensor] = []
        self.is_closed = False

    @property
    def audio(self) -> torch.Tensor:
        return torch.cat(self.parts) if self.parts else torch.zeros(0)

    @property
    def num_known(self) -> int:
        return self.num_rows(sum(len(part) for part in self.parts)) if self.is_closed else 0

    @property
    def is_finished(self) -> bool:
        return self.is_closed and self.num_computed >= self.num_known

    def num_schedulable(self, budget: int) -> int:
        return self.num_pending if self.num_pending <= budget else 0

    def append(self, data: torch.Tensor | None, close: bool = False) -> None:
        if data is not None:
            self.parts.append(data.to(torch.float32).reshape(-1))
        self.is_closed = self.is_closed or close
        if self.is_closed and self.num_known > self.max_rows:
            seconds = sum(len(part) for part in self.parts) / 16000
            self.parts = []
            raise ValueError(f"an utterance of {seconds:.1f} s is more than the audio encoder takes at once "
                             f"({self.max_rows} rows: stages.encoder.scheduler.max_num_batched_tokens)")

    def advance(self, num_tokens: int, result: torch.Tensor) -> torch.Tensor:
        self.num_computed += num_tokens
        self.parts = []
        return result
