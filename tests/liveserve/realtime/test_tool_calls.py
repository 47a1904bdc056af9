"""Function calling through the Realtime API, on scripted stages and a fake clock: tools in session.update
(described in the system message, echoed), a reply held to a call (required, a named function) or left to
the model (auto), the call as a function_call item that is never spoken, its output back into the context as
a user message, and every mistake a client can make with them one error naming the field."""

from __future__ import annotations

import asyncio
import json

import pytest

from stages.commands import AppendInput
from stages.models.tokenizer import TextTokenizer
from tests.liveserve.realtime.interaction_harness import InteractionHarness
from tests.orchestrator.conftest import tiny_pipeline

WIDTH = 64
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city now.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def run(scenario):
    async def main():
        async with InteractionHarness(tiny_pipeline()) as h:
            return await scenario(h)
    return asyncio.run(main())


def tokens(h: InteractionHarness, text: str) -> list[int]:
    tokenizer = h.orch.pipeline.tokenizer
    return tokenizer.encode(text) + [tokenizer.im_end_id]


async def ask(h: InteractionHarness, text: str, **response) -> None:
    await h.client("conversation.item.create", item={"type": "message", "role": "user",
                                                     "content": [{"type": "input_text", "text": text}]})
    await h.client("response.create", **({"response": response} if response else {}))


def last_constraint(h: InteractionHarness):
    generating = [c for c in h.stages.sent("thinker", AppendInput) if c.data is not None and c.data.sampling]
    return generating[-1].data.constraint


def test_tools_are_echoed_and_described_in_the_system_message():
    async def scenario(h):
        await h.client("session.update", session={"tools": [WEATHER, TIME], "tool_choice": "required"})
        return h.of_type("session.updated")[-1]["session"], h.controller.session.context.segments[0].token_ids

    session, system = run(scenario)
    assert [tool["name"] for tool in session["tools"]] == ["get_weather", "get_time"]
    assert session["tool_choice"] == "required" and session["tools"][0]["parameters"] == WEATHER["parameters"]
    text = decoded(system)
    assert "<tools>" in text and '"name": "get_weather"' in text and "<tool_call>" in text


def decoded(ids: list[int]) -> str:
    return TextTokenizer.default().decode(ids)


def test_a_required_call_is_a_function_call_item_never_spoken_and_its_output_joins_the_context():
    async def scenario(h):
        await h.client("session.update", session={"tools": [WEATHER, TIME], "tool_choice": "required"})
        await ask(h, "Weather in Paris?")
        constraint = last_constraint(h)
        turn = h.controller.turn
        spoken = turn.reply.ids
        h.stages.think(h.thinker_id, turn.turn_id, tokens(h, CALL), WIDTH, finish="stop")
        await h.settle()
        done = h.of_type("response.done")[-1]["response"]
        call_id = done["output"][0]["call_id"]
        await h.client("conversation.item.create", item={"type": "function_call_output", "call_id": call_id,
                                                         "output": "Sunny, 21 C."})
        user = h.controller.session.context.segments[-1].token_ids
        return h, constraint, spoken, done, user

    h, constraint, spoken, done, user = run(scenario)
    calls = json.loads(constraint.schema)["anyOf"]
    assert constraint.forced and {call["properties"]["name"]["const"] for call in calls} == {"get_weather", "get_time"}
    assert spoken == {}  # a silent reply: no talker or vocoder request
    types = h.types()
    assert not [t for t in types if "transcript" in t or "output_text" in t or "content_part" in t]
    order = ["response.created", "response.output_item.added", "conversation.item.added",
             "response.function_call_arguments.delta", "response.function_call_arguments.done",
             "response.output_item.done", "conversation.item.done", "response.done"]
    tail = [t for t in types[types.index("response.created"):] if t in order]
    assert tail[:len(order)] == order
    args = h.of_type("response.function_call_arguments.done")[-1]
    assert args["name"] == "get_weather" and json.loads(args["arguments"]) == {"city": "Paris"}
    item = done["output"][0]
    assert done["status"] == "completed" and item["type"] == "function_call" and item["status"] == "completed"
    assert args["call_id"] == item["call_id"] and json.loads(item["arguments"]) == {"city": "Paris"}
    added = [e["item"] for e in h.of_type("conversation.item.added")][-1]
    assert added["type"] == "function_call_output" and added["output"] == "Sunny, 21 C."
    assert "<tool_response>\nSunny, 21 C.\n</tool_response>" in decoded(user)


def test_a_named_function_forces_that_one_and_auto_leaves_the_choice_to_the_model():
    async def scenario(h):
        await h.client("session.update", session={"tools": [WEATHER, TIME],
                                                  "tool_choice": {"type": "function", "name": "get_time"}})
        await ask(h, "What time is it?")
        named = last_constraint(h)
        h.controller.cancel_response()
        await h.settle()
        await h.client("session.update", session={"tool_choice": "auto"})
        await ask(h, "Hello")
        auto = last_constraint(h)
        turn = h.controller.turn
        h.stages.think(h.thinker_id, turn.turn_id, tokens(h, "Hi there."), WIDTH, finish="stop")
        await h.settle()
        return named, auto, h

    named, auto, h = run(scenario)
    assert named.forced and json.loads(named.schema)["properties"]["name"] == {"const": "get_time"}
    assert not auto.forced and len(json.loads(auto.schema)["anyOf"]) == 2
    done = h.of_type("response.done")[-1]["response"]
    assert done["output"][0]["type"] == "message"  # the model chose to answer
    assert "".join(e["delta"] for e in h.of_type("response.output_audio_transcript.delta")) == "Hi there."


def test_with_auto_a_reply_that_starts_a_call_is_a_call_and_not_a_word_of_it_is_spoken():
    async def scenario(h):
        await h.client("session.update", session={"tools": [WEATHER]})
        await ask(h, "Weather in Paris?")
        turn = h.controller.turn
        h.stages.think(h.thinker_id, turn.turn_id, tokens(h, CALL), WIDTH, finish="stop")
        await h.settle()
        h.stages.speak(turn.reply.ids["talker"], 0, finished=True)
        await h.settle()
        h.stages.voice(turn.reply.ids["vocoder"], 0, finished=True)
        await h.settle()
        return turn, h

    turn, h = run(scenario)
    assert turn.segment.spoken == [] and turn.tool_call.name == "get_weather"
    assert not h.of_type("response.output_audio_transcript.delta") and not h.of_type("response.content_part.added")
    assert h.of_type("response.done")[-1]["response"]["output"][0]["type"] == "function_call"


@pytest.mark.parametrize("session, param", [
    ({"tools": [{**WEATHER, "parameters": {"type": "string"}}]}, "session.tools[0].parameters"),
    ({"tools": [{**WEATHER, "parameters": ["city"]}]}, "session.tools[0].parameters"),
    ({"tools": [WEATHER, WEATHER]}, "session.tools[1].name"),
    ({"tools": [{**WEATHER, "name": "get weather"}]}, "session.tools[0].name"),
    ({"tools": [{**WEATHER, "type": "mcp"}]}, "session.tools[0].type"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "session.tool_choice.name"),
    ({"tool_choice": "always"}, "session.tool_choice"),
])
def test_a_bad_tool_definition_is_one_error_naming_the_field_and_the_session_lives_on(session, param):
    async def scenario(h):
        await h.client("session.update", session=session)
        errors = h.of_type("error")
        await h.client("session.update", session={"tools": [WEATHER]})
        return errors, h.of_type("session.updated")

    errors, updated = run(scenario)
    assert [e["error"]["param"] for e in errors] == [param]
    assert [tool["name"] for tool in updated[-1]["session"]["tools"]] == ["get_weather"]


def test_an_output_for_an_unknown_call_is_an_error_and_loses_nothing():
    async def scenario(h):
        await h.client("session.update", session={"tools": [WEATHER]})
        before = len(h.controller.session.context.segments)
        await h.client("conversation.item.create", item={"type": "function_call_output", "call_id": "call_nope",
                                                         "output": "x"})
        await h.client("conversation.item.create", item={"type": "function_call_output", "output": "x"})
        return h.of_type("error"), before, len(h.controller.session.context.segments), h.session.conversation.items

    errors, before, after, items = run(scenario)
    assert [e["error"]["param"] for e in errors] == ["item.call_id", "item.call_id"]
    assert before == after and items == []


def test_tools_cannot_change_per_response_but_the_choice_can():
    async def scenario(h):
        await h.client("session.update", session={"tools": [WEATHER]})
        await h.client("response.create", response={"tools": [TIME]})
        refused = h.of_type("error")
        await h.client("response.create", response={"tools": [WEATHER], "tool_choice": "required"})
        return refused, last_constraint(h)

    refused, constraint = run(scenario)
    assert [e["error"]["param"] for e in refused] == ["response.tools"]
    assert constraint.forced


def test_a_call_cut_short_is_cancelled_and_leaves_nothing_of_itself_in_the_context():
    async def scenario(h):
        await h.client("session.update", session={"tools": [WEATHER], "tool_choice": "required"})
        await ask(h, "Weather in Paris?")
        turn = h.controller.turn
        prefix = list(turn.segment.token_ids)
        h.stages.think(h.thinker_id, turn.turn_id, tokens(h, CALL)[:6], WIDTH)
        await h.settle()
        await h.speak(300)  # the user speaks over it: a barge-in
        await h.client("response.cancel")
        return h, turn, prefix

    h, turn, prefix = run(scenario)
    done = h.of_type("response.done")[-1]["response"]
    assert done["status"] == "cancelled" and done["output"][0]["type"] == "message"
    assert not h.of_type("response.function_call_arguments.done")
    assert len(turn.generated) == 6 and turn.segment.token_ids == prefix  # the assistant header only


def test_required_before_any_tool_is_taken_and_forces_nothing_until_tools_come():
    async def scenario(h):  # pipecat sets tool_choice before its context's tools
        await h.client("session.update", session={"tool_choice": "required"})
        await ask(h, "Hello")
        before = last_constraint(h)
        h.controller.cancel_response()
        await h.settle()
        await h.client("session.update", session={"tools": [WEATHER]})
        await ask(h, "Weather in Paris?")
        return h.of_type("error"), before, last_constraint(h)

    errors, before, after = run(scenario)
    assert errors == [] and before is None and after.forced
