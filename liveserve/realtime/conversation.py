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

from liveserve.realtime.naming import message_item


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
    call: FunctionCall | None = None  # a function_call item's call, or a function_call_output item's result

    def json(self) -> dict:
        """The item as item events and retrieve show it."""
        if self.call is None:
            return message_item(self.item_id, self.role, self.content, self.status)
        return self.call.item_json(self.item_id, self.status)


@dataclass
class FunctionCall:
    """A function call (`output` None: the model's call, whose `arguments` are JSON text) or its result (the
    client's `function_call_output`, `output` its text), by the call's id."""

    call_id: str
    name: str = ""
    arguments: str = ""
    output: str | None = None

    def item_json(self, item_id: str, status: str) -> dict:
        base = {"id": item_id, "object": "realtime.item", "status": status, "call_id": self.call_id}
        if self.output is not None:
            return {**base, "type": "function_call_output", "output": self.output}
        return {**base, "type": "function_call", "name": self.name, "arguments": self.arguments}


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

    def function_call(self, call_id: str) -> Item | None:
        """The model's function_call item of `call_id`."""
        return next((i for i in self.items if i.call is not None and i.call.output is None
                     and i.call.call_id == call_id), None)

    def remove(self, item_id: str) -> None:
        self.items = [i for i in self.items if i.item_id != item_id]
