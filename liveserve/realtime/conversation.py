"""The conversation as the client sees it: items in order, by id."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Item:
    """One message. Assistant items carry their transcript, the length of the audio delivered (a cut does
    not change it: a client may truncate at any point of what it was sent, also after the server's own
    cut at a barge-in) and, per stage, the unheard work already in the server's counters."""

    item_id: str
    role: str
    content: list[dict]
    status: str = "completed"
    audio_ms: float = 0.0
    transcript: str = ""
    unheard_counted: dict[str, int] = field(default_factory=dict)


class Conversation:
    def __init__(self) -> None:
        self.items: list[Item] = []

    def add(self, item: Item) -> str | None:
        """Append; returns the id of the item before it (previous_item_id)."""
        previous = self.items[-1].item_id if self.items else None
        self.items.append(item)
        return previous

    def get(self, item_id: str) -> Item | None:
        return next((i for i in self.items if i.item_id == item_id), None)

    def remove(self, item_id: str) -> None:
        self.items = [i for i in self.items if i.item_id != item_id]
