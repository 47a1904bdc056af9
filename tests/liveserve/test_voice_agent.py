"""The shipped voice agent (configs/voice-cpu.yaml) through the realtime API on 127.0.0.1: Whisper tiny.en
hears, SmolLM2-135M-Instruct answers, Piper speaks; real models, greedy decoding (temperature 0).

Bounds: the question's transcript within word error rate 0.17 of its text (one word of six); the reply's
audio, transcribed back by Whisper a segment at a time, within word error rate 0.25 of the reply's text
(Piper's "France is" is sometimes heard as "Francis"). The answers themselves are the model's own: SmolLM2
knows the capitals of France and Germany.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import yaml

from realtime_harness import ServerProcess, connect, fixture_pcm16, silence
from stages.models.asr_whisper import WhisperASR, WhisperConfig
from tests.stages.speech_harness import word_error_rate
from test_voice_server import CLIP, QUESTION, TRANSCRIBE, opened, reply_audio_16k

VOICE_AGENT = Path(__file__).parents[2] / "configs" / "voice-cpu.yaml"


@pytest.fixture(scope="module")
def agent_server(tmp_path_factory) -> ServerProcess:
    path = tmp_path_factory.mktemp("agent") / "agent.yaml"
    path.write_text(yaml.safe_dump({"base": str(VOICE_AGENT), "stages": {"thinker": {"sampling": {"temperature": 0.0}}}}))
    with ServerProcess(path) as server:
        yield server


@pytest.fixture(scope="module")
def whisper() -> WhisperASR:
    return WhisperASR.load(WhisperConfig(), threads=1)


def test_a_spoken_question_gets_a_spoken_answer_and_a_follow_up_keeps_the_context(agent_server, whisper):
    async def conversation():
        async with connect(agent_server) as ws:
            client = await opened(ws, max_output_tokens=32, audio={"input": TRANSCRIBE})
            await client.append(np.concatenate([silence(500), fixture_pcm16(CLIP), silence(1200)]), realtime=False)
            first = (await client.next("response.done", timeout=90))["response"]
            spoken = reply_audio_16k(client)
            await client.ask("And of Germany?")  # only the context says what is asked
            second = (await client.next("response.done", timeout=90))["response"]
            return client, first, spoken, second

    client, first, spoken, second = asyncio.run(conversation())
    heard = client.received("conversation.item.input_audio_transcription.completed")[0]["transcript"]
    assert word_error_rate(QUESTION, heard) <= 0.17, heard
    answer = first["output"][0]["content"][0]["transcript"]
    assert "Paris" in answer, answer
    said = " ".join(whisper.transcribe(segment) for segment in spoken)
    assert word_error_rate(answer, said) <= 0.25, (answer, said)
    assert "Berlin" in second["output"][0]["content"][0]["transcript"]
