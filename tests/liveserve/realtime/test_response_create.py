"""response.create as LiveKit Agents' OpenAI plugin sends it: `instructions: null` (the session's) and
`metadata` naming the client's request, which the plugin finds again in response.created to hand the
reply to the `generate_reply` call that asked for it; both echoed as OpenAI does, in response.created
and response.done. Wrong metadata refuses the response, naming the field."""

from __future__ import annotations

import asyncio

import pytest

from tests.liveserve.realtime.interaction_harness import InteractionHarness
from tests.liveserve.realtime.test_interaction import WIDTH
from tests.orchestrator.conftest import tiny_pipeline

ASKED = {"client_event_id": "response_create_1a2b"}


def responses(*bodies: dict) -> list[dict]:
    """The events after a text item and one response.create per body, each reply ended by the thinker."""
    async def scenario():
        async with InteractionHarness(tiny_pipeline()) as h:
            await h.client("conversation.item.create", item={"type": "message", "role": "user",
                                                             "content": [{"type": "input_text", "text": "Hi."}]})
            for body in bodies:
                await h.client("response.create", response=body)
                if h.controller.turn is not None:
                    h.stages.think(h.thinker_id, h.controller.turn.turn_id, [10], WIDTH, finish="stop")
                    await h.settle()
            return h.events
    return asyncio.run(scenario())


def test_metadata_is_echoed_and_null_instructions_are_the_sessions():
    events = responses({"instructions": None, "output_modalities": ["text"], "metadata": ASKED},
                       {"output_modalities": ["text"]})
    created = [e["response"] for e in events if e["type"] == "response.created"]
    done = [e["response"] for e in events if e["type"] == "response.done"]
    assert not [e for e in events if e["type"] == "error"]
    assert [r["metadata"] for r in created] == [r["metadata"] for r in done] == [ASKED, None]
    assert [r["status"] for r in done] == ["completed", "completed"]


@pytest.mark.parametrize("metadata", ["id", {"id": 3}, {f"k{i}": "v" for i in range(17)}, {"k" * 65: "v"}])
def test_wrong_metadata_refuses_the_response_naming_the_field(metadata):
    events = responses({"output_modalities": ["text"], "metadata": metadata})
    assert [e["type"] for e in events if e["type"].startswith(("response.", "error"))] == ["error"]
    assert events[-1]["error"]["param"] == "response.metadata"
