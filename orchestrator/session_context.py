"""The orchestrator's view of one session: its thinker context as segments, one per item."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from stages.plan import StageOutput

if TYPE_CHECKING:
    from orchestrator.next_use import NextUseEstimator
    from orchestrator.turn import Turn


@dataclass
class ContextSegment:
    """The thinker positions one conversation item occupies, with its embedding overrides."""

    item_id: str
    token_ids: list[int]
    embeds: list[tuple[int, torch.Tensor]] = field(default_factory=list)
    is_closed: bool = True  # ends with <|im_end|>
    spoken: list[int] = field(default_factory=list)  # indices of tokens that became audio, in order

    def keep_for_heard(self, heard_tokens: int) -> int:
        """Tokens of this segment to keep when only `heard_tokens` spoken tokens were heard."""
        if heard_tokens >= len(self.spoken):
            return len(self.token_ids)
        return self.spoken[heard_tokens]


class SessionContext:
    """Owns a session's resident thinker request and the segments that make up its context.

    Context edits run in the order they were requested: each reserves its place
    with `reserve_edit` when it is created, waits for the edit before it, and
    releases its own place when done. A user item enters the context only between
    generations; a turn holds its place until its thinker generation ends.
    """

    def __init__(self, session_id: str, next_use: NextUseEstimator) -> None:
        self.session_id = session_id
        self.next_use = next_use
        self.thinker_id = f"{session_id}/thinker#0"
        self.num_rebuilds = 0
        self.segments: list[ContextSegment] = []
        self.active_turn: Turn | None = None
        self.num_turns = 0
        self._last_edit: asyncio.Future | None = None

    def reserve_edit(self) -> tuple[asyncio.Future | None, asyncio.Future]:
        """(the previous edit's completion, this edit's completion to resolve when done)."""
        previous, mine = self._last_edit, asyncio.get_running_loop().create_future()
        self._last_edit = mine
        return previous, mine

    @property
    def num_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments)

    @property
    def needs_close(self) -> bool:
        return bool(self.segments) and not self.segments[-1].is_closed

    def segment(self, item_id: str) -> ContextSegment | None:
        return next((s for s in self.segments if s.item_id == item_id), None)

    def append_segment(self, segment: ContextSegment, max_position: int) -> None:
        """Add a segment after the others (closing the one before); ValueError if it does not fit."""
        total = self.num_tokens + len(segment.token_ids)
        if total >= max_position:
            raise ValueError(f"the context would reach {total} tokens, the model's maximum is {max_position}")
        if self.segments:
            self.segments[-1].is_closed = True
        self.segments.append(segment)

    def next_thinker_id(self) -> str:
        self.num_rebuilds += 1
        self.thinker_id = f"{self.session_id}/thinker#{self.num_rebuilds}"
        return self.thinker_id

    def on_output(self, kind: str, output: StageOutput) -> None:
        if self.active_turn is not None:
            self.active_turn.on_output(kind, output)

    def turn_started(self, turn: Turn) -> None:
        self.active_turn = turn
        self.num_turns += 1

    def turn_ended(self, turn: Turn) -> None:
        if self.active_turn is turn:
            self.active_turn = None
