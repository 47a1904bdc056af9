"""A full-duplex session's one resident thinker request: audio frames keep arriving."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch

from stages.config import SamplingParams
from stages.requests.thinker import ThinkerRequest, ThinkerStep


@dataclass(frozen=True)
class DuplexFrame:
    """One frame period of a session's audio: placeholder token ids, each row overridden by `embeds`."""

    index: int
    token_ids: list[int]
    embeds: torch.Tensor  # [len(token_ids), hidden]


class DuplexRequest(ThinkerRequest):
    """Appends every frame to one context and answers each with up to `sampling.max_tokens` tokens.

    A frame enters the context once the previous frame's answer is decoded (frames
    that arrive earlier queue), then its tokens are prefilled and decoded from; the
    previous answer's last token is computed with them, not in a step of its own. Every
    ThinkerStep carries its frame's index as its `tag`, and the frame's last step has a
    finish reason. One generator serves the whole stream. The context only grows:
    without a window the caller keeps it under `max_position` (append raises past it);
    with one, frames leave the request once no step can read them again (`forget`, see
    SinksAndWindow), so a stream of any length holds its sinks and recent frames only.
    """

    def __init__(self, request_id: str, arrival_time: float, stop_ids: frozenset[int], max_position: float,
                 sampling: SamplingParams, prefix: list[int] | None = None) -> None:
        super().__init__(request_id, arrival_time, stop_ids, max_position)
        self.sampling = sampling
        self.generator = torch.Generator().manual_seed(sampling.seed)
        self.token_ids.extend(prefix or [])
        self._queued: deque[DuplexFrame] = deque()
        self._queued_tokens = 0

    @property
    def num_known(self) -> int:
        """A finished frame's last token joins the next frame's prefill: alone it would cost a step per frame."""
        deferred = not self.is_generating and self.num_generated > 0
        return len(self.token_ids) - deferred

    @property
    def num_queued_frames(self) -> int:
        return len(self._queued)

    def append(self, data: DuplexFrame | None, close: bool = False) -> None:
        if data is not None:
            reach = self._reach + len(data.token_ids) + self.sampling.max_tokens
            if reach > self.max_position:
                raise ValueError(f"context could reach {reach} tokens, the model's maximum is {self.max_position}")
            self._queued.append(data)
            self._queued_tokens += len(data.token_ids)
            if not self.is_generating:
                self._start_next()
        self.is_closed = self.is_closed or close

    @property
    def _reach(self) -> int:
        """The context's length once every frame so far is answered with `max_tokens` tokens."""
        answering = self.sampling.max_tokens - self.num_generated if self.is_generating else 0
        return len(self.token_ids) + answering + self._queued_tokens + len(self._queued) * self.sampling.max_tokens

    def _start_next(self) -> None:
        frame = self._queued.popleft()
        self._queued_tokens -= len(frame.token_ids)
        self.embed_spans.append((len(self.token_ids), frame.embeds))
        self.token_ids.extend(frame.token_ids)
        self.num_generated = 0
        self.is_generating = True
        self.tag = frame.index

    def advance(self, num_tokens: int, result: tuple[int, torch.Tensor] | None) -> ThinkerStep | None:
        step = super().advance(num_tokens, result)
        if step is not None and step.finish_reason is not None and self._queued:
            self._start_next()
        return step

    def truncate(self, num_tokens: int) -> None:
        raise ValueError("a duplex stream's context cannot be truncated")
