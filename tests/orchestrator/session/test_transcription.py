"""What a Transcription hands the ASR stage (the speech, without the silence it may end with) and when its
final comes without a pass of the stage."""

from __future__ import annotations

import asyncio

import numpy as np

from orchestrator.session.transcription import Transcription
from stages.commands import AbortRequest, AddRequest, AppendInput
from stages.plan import StageOutput
from stages.requests.asr import Transcript


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


def test_a_pause_is_held_back_then_sent_with_the_speech_and_dropped_when_it_ends_the_speech():
    async def scenario() -> RecordingBus:
        bus = RecordingBus()
        heard = Transcription(bus, "s", "item_1", lambda transcript: None)
        heard.append(chunk(0.1))
        heard.append(chunk(0.0), pausing=True)
        heard.append(chunk(0.0), pausing=True)
        heard.append(chunk(0.2))  # the user went on: the pause was inside the speech
        heard.append(chunk(0.0), pausing=True)
        heard.append(None, close=True)  # the pause ended the speech
        return bus

    bus = asyncio.run(scenario())
    assert isinstance(bus.submitted[0], AddRequest)
    assert appended(bus) == [(1280, True)]  # one message, at the close, without the last pause
    assert np.array_equal(bus.submitted[-1].data, np.concatenate([chunk(0.1), chunk(0.0), chunk(0.0), chunk(0.2)]))


def test_speech_waits_for_a_pass_to_be_due_a_pause_or_partial_every_s_of_it():
    async def scenario() -> tuple[list, list]:
        quiet, partials = RecordingBus(), RecordingBus()
        for bus, every_s in ((quiet, None), (partials, 0.05)):  # 800 samples
            heard = Transcription(bus, "s", "item_1", lambda transcript: None, partial_every_s=every_s)
            for _ in range(6):
                heard.append(chunk(0.1))
            heard.pause(0.3)
            heard.append(chunk(0.1))
            heard.append(None, close=True)
        return quiet.submitted, partials.submitted

    quiet, partials = asyncio.run(scenario())
    sent = [type(c).__name__ for c in quiet]
    assert sent == ["AddRequest", "AppendInput", "TurnEndingHint", "AppendInput"]  # the pause's speech before its hint
    assert [len(c.data) for c in quiet if isinstance(c, AppendInput)] == [1920, 320]
    assert [(0 if c.data is None else len(c.data)) for c in partials if isinstance(c, AppendInput)] == [960, 960, 320]


def partial(heard: Transcription, text: str, num_samples: int) -> None:
    heard.on_output("asr", StageOutput(heard.request_id, Transcript(text, False, num_samples)))


def closed_after_a_pause(pause_pass_first: bool, pause_pass_samples: int = 640):
    """Speech of 640 samples, a pause, the pause's pass (reading `pause_pass_samples`) before or
    after the close; the bus and the transcripts reported."""
    async def scenario():
        bus, reported = RecordingBus(), []
        heard = Transcription(bus, "s", "item_1", reported.append)
        heard.append(chunk(0.1))
        heard.append(chunk(0.2))
        heard.pause(0.25)
        heard.append(chunk(0.0), pausing=True)
        if pause_pass_first:
            partial(heard, "hello there", pause_pass_samples)
        heard.append(None, close=True)
        if not pause_pass_first:
            partial(heard, "hello there", pause_pass_samples)
        if reported and reported[-1].is_final:
            assert await heard.text() == reported[-1].text
        return bus, reported

    return asyncio.run(scenario())


def test_the_final_is_the_pause_pass_when_it_read_all_the_speech_before_the_close():
    bus, reported = closed_after_a_pause(pause_pass_first=True)
    assert [(t.text, t.is_final, t.audio_s) for t in reported] == [("hello there", False, 0.04),
                                                                   ("hello there", True, 0.04)]
    assert appended(bus) == [(640, False)]  # sent at the pause; no close: the stage's request is dropped
    assert isinstance(bus.submitted[-1], AbortRequest)


def test_the_final_is_the_pause_pass_when_it_comes_after_the_close():
    bus, reported = closed_after_a_pause(pause_pass_first=False)
    assert [(t.text, t.is_final) for t in reported] == [("hello there", True)]
    assert appended(bus)[-1] == (0, True) and isinstance(bus.submitted[-1], AbortRequest)


def test_a_pass_that_read_part_of_the_speech_leaves_the_final_to_the_stage():
    for pause_pass_first in (True, False):
        bus, reported = closed_after_a_pause(pause_pass_first, pause_pass_samples=320)
        assert [(t.text, t.is_final) for t in reported] == [("hello there", False)]
        assert appended(bus)[-1] == (0, True)
        assert not any(isinstance(command, AbortRequest) for command in bus.submitted)


def paused_text_when(steps) -> list[str | None]:
    """What `paused_text()` gives after speech of 640 samples, a pause and then `steps(heard)`."""
    async def scenario():
        heard = Transcription(RecordingBus(), "s", "item_1", lambda transcript: None)
        heard.append(chunk(0.1))
        heard.append(chunk(0.2))
        heard.pause(0.3)
        waiting = asyncio.ensure_future(heard.paused_text())
        steps(heard)
        await asyncio.sleep(0)
        return [await waiting, await heard.paused_text()]

    return asyncio.run(scenario())


def test_the_paused_text_is_the_pass_that_read_all_the_speech_sent():
    assert paused_text_when(lambda heard: partial(heard, "read it all", 640)) == ["read it all"] * 2


def test_no_paused_text_once_speech_resumes_or_the_request_ends_first():
    def resumed(heard):
        partial(heard, "part of it", 320)  # a pass that started before the pause
        heard.append(chunk(0.0), pausing=True)
        heard.append(chunk(0.3))  # speech resumes: the pause and this are sent
        partial(heard, "too late", 640)
    assert paused_text_when(resumed) == [None, None]
    assert paused_text_when(lambda heard: heard.abort()) == [None, None]


def test_a_partial_that_read_all_the_speech_before_the_pause_is_the_paused_text():
    async def scenario():
        heard = Transcription(RecordingBus(), "s", "item_1", lambda transcript: None)
        heard.append(chunk(0.1))
        partial(heard, "said so far", 320)
        heard.pause(0.3)
        return await heard.paused_text(), heard.final_text

    assert asyncio.run(scenario()) == ("said so far", None)
