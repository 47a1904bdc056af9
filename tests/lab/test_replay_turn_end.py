"""A replayed spoken turn ends where a VAD keeping up with the mic would end it, however late the server hears it."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from lab.client.audio import SAMPLE_RATE
from lab.replay.session_runner import TRAILING_SILENCE_MS, _speak_prompt


class LaggingClient:
    """The client calls `_speak_prompt` makes, on a fake clock: streaming takes `send_lag_s` more than the audio
    lasts (the server reads slowly), and the commit comes `commit_lag_s` after the stream ends."""

    def __init__(self, send_lag_s: float, commit_lag_s: float) -> None:
        self.now, self.send_lag_s, self.commit_lag_s = 100.0, send_lag_s, commit_lag_s
        self.session = {"audio": {"input": {"turn_detection": {"silence_duration_ms": 500}}}}
        self.events: list = []
        self.streamed: list[int] = []

    def clock(self) -> float:
        return self.now

    async def stream_audio(self, pcm: np.ndarray) -> None:
        self.streamed.append(len(pcm))
        self.now += len(pcm) / SAMPLE_RATE + self.send_lag_s

    async def wait_for(self, event_type: str, since: int, timeout: float) -> None:
        assert event_type == "input_audio_buffer.committed"
        self.now += self.commit_lag_s


@pytest.mark.parametrize("send_lag_s,commit_lag_s", [(0.0, 0.0), (1.5, 0.0), (0.0, 2.0), (3.0, 1.0)])
def test_the_turn_ends_at_the_speech_end_plus_the_silence_duration(send_lag_s, commit_lag_s):
    client = LaggingClient(send_lag_s, commit_lag_s)
    speech = np.zeros(2 * SAMPLE_RATE, np.int16)  # 2 s
    turn_end = asyncio.run(_speak_prompt(client, speech, timeout_s=60))
    assert turn_end == pytest.approx(100.0 + 2.0 + 0.5)
    assert client.streamed == [len(speech) + TRAILING_SILENCE_MS * SAMPLE_RATE // 1000]
    assert client.now >= turn_end + TRAILING_SILENCE_MS / 1000 - 0.5  # the reply is asked for only after it


def test_a_session_that_reports_no_silence_duration_ends_the_turn_after_the_one_the_replay_asked_for():
    client = LaggingClient(0.0, 0.0)
    client.session = {"audio": {"input": {"turn_detection": None}}}
    turn_end = asyncio.run(_speak_prompt(client, np.zeros(SAMPLE_RATE, np.int16), timeout_s=60))
    assert turn_end == pytest.approx(100.0 + 1.0 + 0.5)
