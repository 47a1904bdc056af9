"""Hostile input at the protocol edge: random and mutated client events, pushed into an in-process session.

Properties: nothing escapes `handle`; no event makes the server fault (a `server_error` event is a fault of
ours caught by the safety net); no event gets more than one `error`; the writer writes everything; and
afterwards the session still completes a turn.
"""

from __future__ import annotations

import asyncio
import base64
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.liveserve.realtime.interaction_harness import InteractionHarness
from tests.orchestrator.conftest import tiny_pipeline

TONE = base64.b64encode(bytes(range(256)) * 4).decode()  # 512 samples of PCM16
VALID = [
    {"type": "session.update", "session": {"instructions": "Be brief.", "output_modalities": ["text"]}},
    {"type": "session.update", "session": {"audio": {"input": {"turn_detection": None}}}},
    {"type": "session.update", "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}},
                                                     "output": {"voice": "alloy"}}}},
    {"type": "session.update", "session": {"liveserve": {"duplex": True}}},
    {"type": "session.update", "session": {"liveserve": {"duplex": False}}},
    {"type": "input_audio_buffer.append", "audio": TONE},
    {"type": "input_audio_buffer.commit"},
    {"type": "input_audio_buffer.clear"},
    {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "id": "u1",
                                                  "content": [{"type": "input_text", "text": "Hi"}]}},
    {"type": "conversation.item.create", "item": {"role": "user", "content": [{"type": "input_audio", "audio": TONE}]}},
    {"type": "conversation.item.truncate", "item_id": "u1", "content_index": 0, "audio_end_ms": 10},
    {"type": "conversation.item.delete", "item_id": "u1"},
    {"type": "response.create", "response": {"output_modalities": ["text"], "max_output_tokens": 4}},
    {"type": "response.cancel"},
    {"type": "playback.ack", "played_ms": 100, "item_id": "x"},
]
SURROGATES = st.sampled_from(["\ud800", "a\udfffb", "\ud83d"])
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True, allow_infinity=True),
                   st.text(max_size=20), SURROGATES, st.just("A" * 5000))
JSON = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                    max_leaves=8)


def mutate(event: dict, path: list[str], value: object) -> dict:
    """`event` with the value at `path` (keys, as deep as the event goes) replaced by `value`."""
    copy = json.loads(json.dumps(event))
    node = copy
    for key in path[:-1]:
        if not isinstance(node.get(key), dict):
            break
        node = node[key]
    else:
        node[path[-1]] = value
        return copy
    node[key] = value
    return copy


def keys_of(event: dict) -> list[list[str]]:
    paths = []
    for key, value in event.items():
        paths.append([key])
        if isinstance(value, dict):
            paths += [[key, *sub] for sub in keys_of(value)]
    return paths


@st.composite
def hostile_events(draw) -> str:
    kind = draw(st.sampled_from(["mutated", "valid", "raw"]))
    if kind == "raw":
        return draw(st.sampled_from(["", "{", "[]", "null", '"x"', "{" * 30000 + "}" * 30000, '{"type": 3}',
                                     '{"type": "x\\ud800"}', '{"type": "input_audio_buffer.append", "audio": "%%"}']))
    event = draw(st.sampled_from(VALID))
    if kind == "mutated":
        event = mutate(event, draw(st.sampled_from(keys_of(event))), draw(JSON))
    return json.dumps(event)


async def completes_a_text_turn(h: InteractionHarness) -> dict:
    """Whatever the fuzz left: duplex off, turns by hand, text out; then a turn must complete."""
    await h.client("session.update", session={"liveserve": {"duplex": False}, "output_modalities": ["text"],
                                              "audio": {"input": {"turn_detection": None}}})
    if h.controller.turn is not None:
        await h.client("response.cancel")
    assert h.controller.turn is None
    h.stages.encode_the_rest(4, 64)  # the fuzz's audio items, if any, enter the context
    await h.settle()
    await h.client("conversation.item.create", item={"role": "user", "content": [{"type": "input_text",
                                                                                  "text": "Still there?"}]})
    await h.client("response.create", response={"max_output_tokens": 2})
    turn = h.controller.turn
    h.stages.think(h.thinker_id, turn.turn_id, [10, 11], 64, finish="length")
    await h.settle()
    return h.of_type("response.done")[-1]["response"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_events(), min_size=1, max_size=6))
def test_hostile_events_get_errors_and_the_session_goes_on(messages):
    async def scenario():
        async with InteractionHarness(tiny_pipeline()) as h:
            for raw in messages:
                before = len(h.of_type("error"))
                await h.session.handle(raw)  # nothing may escape
                await h.settle()
                errors = h.of_type("error")[before:]
                assert len(errors) <= 1, errors
                assert all(e["error"]["code"] != "server_error" for e in errors), errors  # no fault of ours
            assert not h.session.ended.is_set()  # the writer wrote every event
            return await completes_a_text_turn(h)

    done = asyncio.run(scenario())
    assert done["status"] == "incomplete" and done["usage"]["output_tokens"] == 2


WRONG_TYPES = [None, 0, -1, 1e308, float("inf"), "x", "\ud800", [], {}, [["audio"]], True, "A" * 100_000]


def test_every_field_of_every_event_given_a_wrong_type_gets_at_most_one_error_and_no_fault():
    async def scenario():
        faults = []
        async with InteractionHarness(tiny_pipeline()) as h:
            for event in VALID:
                for path in keys_of(event):
                    for value in WRONG_TYPES:
                        before = len(h.of_type("error"))
                        await h.session.handle(json.dumps(mutate(event, path, value)))
                        await h.settle()
                        errors = h.of_type("error")[before:]
                        if len(errors) > 1 or any(e["error"]["code"] == "server_error" for e in errors):
                            faults.append((event["type"], path, repr(value)[:20], errors))
            assert not h.session.ended.is_set()
            return faults, await completes_a_text_turn(h)

    faults, done = asyncio.run(scenario())
    assert faults == []
    assert done["status"] == "incomplete"
