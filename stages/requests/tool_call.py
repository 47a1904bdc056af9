"""What a turn's generation must be when it calls a tool: a grammar's spec, travelling with the turn."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolCallConstraint:
    """A generation that is (or, not `forced`, may be) one tool call in the Hermes / Qwen2.5 format.

    `schema` is the JSON schema, as JSON text, of the call object, e.g. an `anyOf` of one
    {"name": {"const": ...}, "arguments": <the tool's parameters>} object per tool. A call is the text
    `begin` + one JSON value valid for `schema` + `end`, then one of the request's stop tokens
    (`ThinkerRequest.stop_ids`), after which the generation finishes with finish_reason "stop".
    - `forced`: the generated text is exactly a call.
    - not `forced` ("auto"): the model chooses. A reply that starts with `begin` is a call as above;
      any other reply is unconstrained from its first token that leaves `begin` behind (a special
      token, the stop token included, leaves it at once). With an empty `begin` every reply is a call.
    The JSON is on one line, laid out as Python's json.dumps writes it (", " between items, ": " after keys,
    no other whitespace), an object's properties in the schema's order. `begin` and `end` are text, not
    special tokens (an added token the tokenizer does not mark special, as Qwen2.5's "<tool_call>", is text
    like any other); special tokens never occur inside a call, and a stop token only after its `end`.
    `max_tokens` still applies: a call it cuts ends with "length" and is invalid. Hashable and picklable: a
    stage caches what it compiled of it.
    """

    schema: str
    begin: str = "<tool_call>\n"
    end: str = "\n</tool_call>"
    forced: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.schema, str) or not isinstance(self.begin, str) or not isinstance(self.end, str):
            raise ValueError("a tool call constraint's schema, begin and end are strings")
