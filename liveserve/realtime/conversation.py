"""The conversation as the client sees it: items in order, by id.

The model's conversation is the session's SessionContext (orchestrator.session.context): one segment
of thinker positions per item, under the same item ids (the controller mints them, or takes the
client's). Both follow the session's one edit order, so they never disagree on order; they stay two
because they hold different items at different times, and only this one holds what the client is
echoed:
- a user item is here from `conversation.item.added`, in the context only once encoded (or
  transcribed), and never if it is rejected (then it leaves here too);
- an assistant item is here from `response.created`; its segment comes once earlier edits are in,
  and never if its reply failed first, while the item stays here (`incomplete`);
- the system message is a segment and no item;
- a cut keeps here the audio delivered (the bound of a client's `audio_end_ms`) and the content
  parts as echoed, while the segment keeps only the tokens heard.
Item create, delete, truncate and retrieve are answered from here; the controller edits the context.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Item:
    """One message as the client sees it (its content parts, as echoed in item events). Assistant items
    carry their transcript, the length of the audio delivered (a cut does not change it: a client may
    truncate at any point of what it was sent, also after the server's own cut at a barge-in) and, per
    stage, the unheard work already in the server's counters. Kept beside the reply's Turn (the
    generation, released a few replies later) and its ResponseStream (the response's events, gone at
    `response.done`): the item is what the client may retrieve, truncate or delete at any later time."""

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
