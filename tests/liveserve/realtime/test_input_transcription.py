"""Transcription events of the user's speech: deltas of what partial transcripts agree on, then completed."""

from __future__ import annotations

import pytest

from liveserve.realtime.conversation import Conversation, Item
from liveserve.realtime.input_transcription import InputTranscription, stable_delta
from orchestrator.interaction.events import UserTranscript
from tests.liveserve.realtime.test_protocol_schema import BETA, GA


@pytest.mark.parametrize(("sent", "previous", "text", "is_final", "delta"), [
    ("", "What is", "What is the", False, "What is "),  # the last word of a partial may still grow
    ("", "", "What is the", False, ""),  # a first partial: nothing agreed on yet
    ("What is ", "What is the", "What is the capital.", False, "the "),
    ("What is ", "What is the capital on", "What is the capital of France", False, "the capital "),  # "on" heard once
    ("What is the ", "", "What is the capital of France?", True, "capital of France?"),  # the final counts whole
    ("What is ", "Was it", "Was it the capital", False, ""),  # a revision of what was sent: no delta
    ("", "What", "What", False, ""),
    ("", "", "", True, ""),
])
def test_a_delta_extends_what_was_sent_by_the_words_two_partials_agree_on(sent, previous, text, is_final, delta):
    assert stable_delta(sent, text, is_final, previous) == delta


def test_deltas_join_to_the_transcript_and_completed_fills_the_items_audio_part():
    events = []
    conversation = Conversation()
    transcription = InputTranscription(lambda name, **fields: events.append({"type": name, **fields}), conversation)
    transcription.report(UserTranscript("item_1", "What is", False, 0.5))  # off: nothing
    assert events == []
    transcription.enabled = True
    for text in ("What is", "What is the capital", "What is the capital of"):
        transcription.report(UserTranscript("item_1", text, False, 1.0))
    conversation.add(Item("item_1", "user", [{"type": "input_audio", "transcript": None}]))
    transcription.report(UserTranscript("item_1", "What is the capital of France?", True, 2.0))
    deltas = [e["delta"] for e in events if e["type"].endswith(".delta")]
    assert deltas == ["What is ", "the capital ", "of France?"]
    completed = events[-1]
    assert completed["type"] == "conversation.item.input_audio_transcription.completed"
    assert completed["transcript"] == "".join(deltas) and completed["usage"] == {"type": "duration", "seconds": 2.0}
    assert conversation.get("item_1").content == [{"type": "input_audio", "transcript": "What is the capital of France?"}]
    for schema in (GA, BETA):
        for number, event in enumerate(events):
            schema[event["type"]].model_validate({**event, "event_id": f"event_{number}"})
