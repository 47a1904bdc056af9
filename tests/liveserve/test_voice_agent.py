"""The shipped voice agent (configs/voice-cpu.yaml) through the realtime API on 127.0.0.1: Whisper tiny.en
hears, SmolLM2-135M-Instruct answers, Piper speaks; real models, greedy decoding (temperature 0). Reached
by this project's test client, by the openai SDK and by `liveserve client`.

Bounds: the question's transcript within word error rate 0.17 of its text (one word of six); the reply's
audio, transcribed back by Whisper a segment at a time, within word error rate 0.25 of the reply's text
(Piper's "France is" is sometimes heard as "Francis"). The answers themselves are the model's own: SmolLM2
knows the capitals of France and Germany.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from lab.clips import clip_path
from lab.word_error import word_error_rate
from stages.models.asr_whisper import WhisperASR, WhisperConfig
from tests.liveserve.realtime.realtime_harness import ServerProcess, connect, fixture_pcm16, silence
from tests.liveserve.realtime.test_voice_server import CLIP, QUESTION, TRANSCRIBE, opened, reply_audio_16k

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


def test_the_openai_sdk_gets_a_spoken_answer_in_words(agent_server):
    openai = pytest.importorskip("openai")

    async def scenario():
        client = openai.AsyncOpenAI(api_key="unused", base_url=f"http://127.0.0.1:{agent_server.port}/v1",
                                    websocket_base_url=f"ws://127.0.0.1:{agent_server.port}/v1")
        audio_bytes = 0
        async with client.realtime.connect(model="voice-agent") as conn:
            await conn.session.update(session={"type": "realtime", "max_output_tokens": 24,
                                               "audio": {"output": {"voice": "marin"}}})
            await conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "What is the capital of France?"}]})
            await conn.response.create()
            async for event in conn:
                if event.type == "response.output_audio.delta":
                    audio_bytes += len(event.delta)
                if event.type in ("response.done", "error"):
                    return event, audio_bytes

    last, audio_bytes = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert last.type == "response.done", last
    assert "Paris" in last.response.output[0].content[0].transcript and audio_bytes > 24000 * 2  # > 1 s spoken


def test_liveserve_client_speaks_a_clip_and_reports_the_answer(agent_server, tmp_path):
    out = tmp_path / "reply.wav"
    done = subprocess.run([sys.executable, "-m", "liveserve.cli", "client", "--wav", str(clip_path(CLIP)),
                           "--url", agent_server.url, "--out", str(out), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["status"] in ("completed", "incomplete") and "Paris" in summary["transcript"], summary
    assert summary["audio_s"] > 1.0 and out.stat().st_size > 24000 * 2
