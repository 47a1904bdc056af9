"""session.update as the client frameworks send it: semantic_vad (GA and beta shapes), settings LiveServe
does without (applied without them, one error naming them after session.updated), input transcription
(no ASR stage: named), and the mistakes that still refuse the whole update."""

from __future__ import annotations

import asyncio

import pytest

from liveserve.realtime.naming import Dialect
from tests.liveserve.realtime.interaction_harness import InteractionHarness
from tests.orchestrator.conftest import tiny_pipeline


def update(session: dict, beta: bool = False) -> list[dict]:
    """The events a fresh session answers one session.update with (session.created left out)."""
    async def scenario():
        async with InteractionHarness(tiny_pipeline(), dialect=Dialect(beta)) as h:
            await h.client("session.update", session=session)
            return h.events[1:], h.controller.turn_taking
    events, turn_taking = asyncio.run(scenario())
    return events, turn_taking


def test_semantic_vad_in_the_ga_shape_is_applied_and_reported_as_openai_does():
    events, turn_taking = update({"type": "realtime", "audio": {"input": {"turn_detection": {
        "type": "semantic_vad", "eagerness": "low", "create_response": True, "interrupt_response": False}}}})
    assert [e["type"] for e in events] == ["session.updated"]
    assert events[0]["session"]["audio"]["input"]["turn_detection"] == {
        "type": "semantic_vad", "eagerness": "low", "create_response": True, "interrupt_response": False}
    assert (turn_taking.kind, turn_taking.eagerness, turn_taking.interrupt_response) == ("semantic_vad", "low", False)
    assert turn_taking.detection.silence_duration_ms == 8000  # low: the user may take up to 8 s


def test_semantic_vad_in_the_beta_shape_defaults_to_auto():
    events, turn_taking = update({"turn_detection": {"type": "semantic_vad"}}, beta=True)
    assert [e["type"] for e in events] == ["session.updated"]
    assert events[0]["session"]["turn_detection"] == {"type": "semantic_vad", "eagerness": "auto",
                                                      "create_response": True, "interrupt_response": True}
    assert turn_taking.detection.silence_duration_ms == 500 and turn_taking.detection.completion_threshold == 0.5


@pytest.mark.parametrize("detection, param", [
    ({"type": "semantic_vad", "eagerness": "eager"}, "session.audio.input.turn_detection.eagerness"),
    ({"type": "semantic_vad", "eagerness": 3}, "session.audio.input.turn_detection.eagerness"),
    ({"type": "near_field"}, "session.audio.input.turn_detection.type"),
])
def test_a_wrong_turn_detection_refuses_the_whole_update(detection, param):
    events, turn_taking = update({"instructions": "Be brief.", "audio": {"input": {"turn_detection": detection}}})
    assert [e["type"] for e in events] == ["error"]
    assert events[0]["error"]["param"] == param
    assert turn_taking.kind == "server_vad"


@pytest.mark.parametrize("transcription, param", [
    ("whisper-1", "session.audio.input.transcription"),
    ({"model": 1}, "session.audio.input.transcription.model"),
])
def test_a_wrong_transcription_setting_refuses_the_whole_update(transcription, param):
    events, turn_taking = update({"instructions": "Be brief.", "audio": {"input": {
        "transcription": transcription, "turn_detection": {"type": "semantic_vad"}}}})
    assert [e["type"] for e in events] == ["error"]
    assert events[0]["error"]["param"] == param and events[0]["error"]["code"] == "invalid_type"
    assert turn_taking.kind == "server_vad"


def test_unsupported_settings_are_ignored_the_rest_applied_and_one_error_names_them():
    events, turn_taking = update({"instructions": "Be brief.", "audio": {"input": {
                                      "noise_reduction": {"type": "near_field"},
                                      "turn_detection": {"type": "semantic_vad", "eagerness": "high"}},
                                      "output": {"voice": "my-cloned-voice"}}})
    assert [e["type"] for e in events] == ["session.updated", "error"]
    session, error = events[0]["session"], events[1]["error"]
    assert session["instructions"] == "Be brief." and turn_taking.eagerness == "high"
    assert session["audio"]["output"]["voice"] == "alloy" and session["tools"] == []  # what is in effect
    assert error["code"] == "parameter_ignored" and error["param"] == "session.audio.input.noise_reduction"
    for named in ("session.audio.input.noise_reduction", "session.audio.output.voice"):
        assert named in error["message"]


@pytest.mark.parametrize("beta", [False, True])
def test_openai_voice_names_and_tracing_are_taken_and_echoed(beta):
    voice = {"voice": "ash"} if beta else {"audio": {"output": {"voice": "ash"}}}
    events, _ = update({**voice, "tracing": {"workflow_name": "support", "metadata": {"team": 3}}}, beta=beta)
    assert [e["type"] for e in events] == ["session.updated"]
    session = events[0]["session"]
    assert (session["voice"] if beta else session["audio"]["output"]["voice"]) == "ash"
    assert beta or session["tracing"] == {"workflow_name": "support", "metadata": {"team": 3}}


@pytest.mark.parametrize("tracing, code, param", [
    (3, "invalid_type", "session.tracing"),
    ({"workflow": "x"}, "invalid_value", "session.tracing.workflow"),
    ({"group_id": 7}, "invalid_type", "session.tracing.group_id"),
])
def test_a_wrong_tracing_setting_refuses_the_update(tracing, code, param):
    events, _ = update({"instructions": "Be brief.", "tracing": tracing})
    assert [(e["type"], e["error"]["code"], e["error"]["param"]) for e in events] == [("error", code, param)]


def test_tracing_cannot_be_changed_once_on():
    async def scenario():
        async with InteractionHarness(tiny_pipeline()) as h:
            await h.client("session.update", session={"tracing": "auto"})
            await h.client("session.update", session={"tracing": "auto", "instructions": "Be brief."})
            await h.client("session.update", session={"tracing": {"workflow_name": "other"}})
            return [e["type"] for e in h.events[1:]], h.events[-1]
    types, last = asyncio.run(scenario())
    assert types == ["session.updated", "session.updated", "error"]
    assert last["error"]["param"] == "session.tracing" and "once it is on" in last["error"]["message"]


def test_input_transcription_is_named_as_unavailable_and_the_rest_applied():
    events, _ = update({"instructions": "Be brief.", "audio": {"input": {
        "transcription": {"model": "gpt-4o-mini-transcribe"}}}})
    assert [e["type"] for e in events] == ["session.updated", "error"]
    assert events[0]["session"]["instructions"] == "Be brief."
    assert events[0]["session"]["audio"]["input"]["transcription"] is None
    error = events[1]["error"]
    assert error["param"] == "session.audio.input.transcription" and "no speech recognition" in error["message"]


def test_beta_transcription_is_named_in_the_beta_shape():
    events, _ = update({"input_audio_transcription": {"model": "whisper-1"}, "voice": "alloy"}, beta=True)
    assert [e["type"] for e in events] == ["session.updated", "error"]
    assert events[1]["error"]["param"] == "session.input_audio_transcription"


def test_settings_that_ask_for_nothing_are_not_reported():
    events, _ = update({"tools": [], "tool_choice": "auto", "tracing": None, "audio": {
        "input": {"transcription": None, "noise_reduction": None}, "output": {"voice": "alloy", "speed": 1.0}}})
    assert [e["type"] for e in events] == ["session.updated"]


def test_speech_ends_a_semantic_vad_turn_when_the_model_calls_it_complete():
    async def scenario():
        async with InteractionHarness(tiny_pipeline()) as h:
            await h.client("session.update", session={"audio": {"input": {"turn_detection": {
                "type": "semantic_vad", "create_response": False}}}})
            h.turn_model.complete = 0.2  # not complete: the first pause goes on
            await h.speak(600, then_silence_ms=300)
            await asyncio.sleep(0.05)
            before = list(h.types())
            h.turn_model.complete = 0.9
            await h.speak(600, then_silence_ms=300)
            stopped = await h.wait_for("input_audio_buffer.speech_stopped")
            return before, stopped, h.turn_model.asked
    before, stopped, asked = asyncio.run(scenario())
    assert "input_audio_buffer.speech_started" in before and "input_audio_buffer.speech_stopped" not in before
    assert stopped["audio_end_ms"] == 1504  # the second pause: 600 + 300 + 600 ms, to the 32 ms window
    assert len(asked) == 2 and asked[1] > asked[0]  # the model heard the turn so far, both times
