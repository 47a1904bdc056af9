"""The turns of a session's latest replies, kept for as long as a truncation may still measure them."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from orchestrator.session.turn import Turn

MEASURED_REPLIES = 4  # a session's latest replies whose unheard work a truncation measures


class RecentReplies:
    """The turns of a session's latest `capacity` replies, by assistant item id, oldest first.

    A truncation of a reply measures the work its turn generated beyond what was heard
    (`Turn.unheard`). The reply being played is the newest or, when a client asked for a response
    while it still played the one before, one of the few before it; replies further back have
    played out. So each new reply releases the oldest beyond `capacity`: a long session holds
    `capacity` turns, not all of them. The newest (the reply in progress, if any) is never released.
    """

    def __init__(self, capacity: int = MEASURED_REPLIES) -> None:
        if capacity < 1:
            raise ValueError(f"at least the reply in progress is kept; capacity {capacity} keeps none")
        self.capacity = capacity
        self._turns: OrderedDict[str, Turn] = OrderedDict()

    def __len__(self) -> int:
        return len(self._turns)

    def add(self, turn: Turn) -> None:
        """Keep `turn` as the newest reply, releasing the oldest beyond capacity."""
        self._turns[turn.item_id] = turn
        while len(self._turns) > self.capacity:
            self._turns.popitem(last=False)

    def get(self, item_id: str | None) -> Turn | None:
        """The turn of reply `item_id`; None if no kept reply has it (none of this session's, or released)."""
        return self._turns.get(item_id)
