"""What a Transcription hands the ASR stage: the speech, without the silence it may end with."""

from __future__ import annotations

import asyncio

import numpy as np

from orchestrator.transcription import Transcription
from stages.commands import AddRequest, AppendInput


class RecordingBus:
    """The StageBus calls a Transcription makes, recorded."""

    def __init__(self) -> None:
        self.submitted: list = []

    def clock(self) -> float:
        return 0.0

    def own(self, request_id, owner) -> None:
        pass

    def disown(self, request_id) -> None:
        pass

    def submit(self, kind, command) -> None:
        self.submitted.append(command)


def appended(bus: RecordingBus) -> list[tuple[int, bool]]:
    """(samples, close) of each AppendInput sent."""
    return [(0 if c.data is None else len(c.data), c.close) for c in bus.submitted if isinstance(c, AppendInput)]


def chunk(value: float, n: int = 320) -> np.ndarray:
    return np.full(n, value, np.float32)


def test_a_pause_is_held_back_then_sent_when_speech_resumes_and_dropped_when_it_ends_the_speech():
    async def scenario() -> RecordingBus:
        bus = RecordingBus()
        heard = Transcription(bus, "s", "item_1", lambda transcript: None, partial_every_s=0.5)
        heard.append(chunk(0.1))
        heard.append(chunk(0.0), pausing=True)
        heard.append(chunk(0.0), pausing=True)
        heard.append(chunk(0.2))  # the user went on: the pause was inside the speech
        held_then_resumed = list(bus.submitted)
        heard.append(chunk(0.0), pausing=True)
        heard.append(None, close=True)  # the pause ended the speech
        assert isinstance(held_then_resumed[0], AddRequest)
        joined = held_then_resumed[-1].data
        assert np.array_equal(joined, np.concatenate([chunk(0.0), chunk(0.0), chunk(0.2)]))
        return bus

    bus = asyncio.run(scenario())
    assert appended(bus) == [(320, False), (960, False), (0, True)]
