"""Every event LiveServe emits parses with the `openai` package's own server-event models, GA and beta.

A recorded session (in process: scripted stages, a fake clock) goes through a spoken turn, a text turn, a
barge-in, a client truncate, a cancel, a retrieve, client mistakes, semantic_vad and settings LiveServe
ignores; each event it sends is validated.
"""

from __future__ import annotations

import asyncio
import typing

import pytest

from liveserve.realtime.naming import Dialect
from tests.liveserve.realtime.interaction_harness import InteractionHarness
from tests.liveserve.realtime.test_interaction import FRAME, WIDTH, spoken_reply_playing
from tests.orchestrator.conftest import tiny_pipeline


def models_by_type(union) -> dict[str, type]:
    """The SDK's model for each server event type of a (possibly annotated) union of event models."""
    members = typing.get_args(typing.get_args(union)[0] if typing.get_origin(union) is typing.Annotated else union)
    return {typing.get_args(model.model_fields["type"].annotation)[0]: model for model in members}


LOOKUP = {"type": "function", "name": "lookup", "description": "An order's state.",
          "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}}
# The beta schema lists OpenAI's own model names in `session.model`; LiveServe names the model it serves.
BETA_MODEL = "gpt-4o-realtime-preview"
GA = models_by_type(pytest.importorskip("openai.types.realtime.realtime_server_event").RealtimeServerEvent)
BETA = models_by_type(pytest.importorskip("openai.types.beta.realtime.realtime_server_event").RealtimeServerEvent)


async def a_recorded_session(h: InteractionHarness) -> None:
    item_id, ids = await spoken_reply_playing(h)  # a spoken turn, its reply playing
    await h.client("playback.ack", played_ms=120)
    await h.speak(300)  # barge-in
    await h.client("conversation.item.retrieve", item_id=item_id)
    await h.client("conversation.item.create", item={"type": "message", "role": "user",
                                                     "content": [{"type": "input_text", "text": "And then?"}]})
    await h.client("response.create", response={"output_modalities": ["text"], "max_output_tokens": 2,
                                                 "instructions": None, "metadata": {"client_event_id": "c1"}})
    h.stages.think(h.thinker_id, h.controller.turn.turn_id, [10, 11], WIDTH, finish="length")
    await h.settle()
    await h.client("response.create")  # a spoken reply, cancelled by the client
    turn = h.controller.turn
    h.stages.think(h.thinker_id, turn.turn_id, [12, 13], WIDTH)
    h.stages.speak(turn.reply.ids["talker"], 4)
    await h.settle()
    h.stages.voice(turn.reply.ids["vocoder"], 4 * FRAME)
    await h.settle()
    await h.client("response.cancel")
    await h.client("conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=80)
    await h.client("input_audio_buffer.clear")
    await h.client("conversation.item.delete", item_id="nope")  # a mistake: an error event
    await h.client("session.update", session={"instructions": "Be brief."})
    await a_function_call(h)
    await h.client("session.update", session={  # semantic_vad, and settings ignored with an error naming them
        "tools": [LOOKUP], "audio": {"input": {"noise_reduction": {"type": "near_field"},
            "transcription": {"model": "whisper-1"}, "turn_detection": {"type": "semantic_vad", "eagerness": "high"}}}})


async def a_function_call(h: InteractionHarness) -> None:
    """A reply that must call the session's tool, the call's output, then the choice back to auto."""
    await h.client("session.update", session={"tools": [LOOKUP], "tool_choice": "required"})
    await h.client("response.create")
    tokenizer = h.orch.pipeline.tokenizer
    call = '<tool_call>\n{"name": "lookup", "arguments": {"order": 42}}\n</tool_call>'
    h.stages.think(h.thinker_id, h.controller.turn.turn_id, tokenizer.encode(call) + [tokenizer.im_end_id], WIDTH,
                   finish="stop")
    await h.settle()
    call_id = h.of_type("response.done")[-1]["response"]["output"][0]["call_id"]
    await h.client("conversation.item.create", item={"type": "function_call_output", "call_id": call_id,
                                                     "output": "shipped"})
    await h.client("session.update", session={"tool_choice": "auto"})


def record(beta: bool) -> list[dict]:
    async def scenario():
        async with InteractionHarness(tiny_pipeline(), dialect=Dialect(beta)) as h:
            await a_recorded_session(h)
            return h.events
    return asyncio.run(scenario())


@pytest.mark.parametrize("beta, schema", [(False, GA), (True, BETA)], ids=["ga", "beta"])
def test_every_event_of_a_recorded_session_parses_with_the_sdks_models(beta, schema):
    events = record(beta)
    failures = []
    for event in events:
        model = schema.get(event["type"])
        if model is None:
            failures.append((event["type"], "not a server event of this API"))
            continue
        if beta and event["type"].startswith("session."):
            event = {**event, "session": {**event["session"], "model": BETA_MODEL}}  # see BETA_MODEL
        try:
            model.model_validate(event)
        except ValueError as error:
            failures.append((event["type"], str(error).splitlines()[:4]))
    assert failures == []
    kinds = {event["type"] for event in events}
    last = [event["session"] for event in events if event["type"] == "session.updated"][-1]
    detection = last["turn_detection"] if beta else last["audio"]["input"]["turn_detection"]
    assert detection["type"] == "semantic_vad" and events[-1]["error"]["code"] == "parameter_ignored"
    assert len(kinds) >= 20 and {"error", "conversation.item.retrieved", "conversation.item.truncated",
                                 "response.function_call_arguments.done"} <= kinds
