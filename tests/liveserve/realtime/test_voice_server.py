"""The realtime API on a server of asr -> thinker -> tts (configs/voice-cpu-tiny.yaml with a smaller
thinker): Whisper tiny.en hears, tiny-omni's thinker (seeded random weights) answers, Piper speaks.

Bound: q_capital's transcript within word error rate 0.17 of its text (tests/stages/speech_harness.py:
one word of six; measured 0). The thinker's random tokens are mostly not words
("slorchakaldexitgithubingerES"), and Whisper hearing Piper say them back may loop ("Texas, Texas, ..."
in one CI run), so here the reply's audio is only checked to be speech-loud and as long as its segments;
that the TTS speaks a reply's words, heard back within a word error rate, is test_voice_agent.py's check
on the real voice agent.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.signal import resample_poly

from lab.word_error import word_error_rate
from tests.liveserve.realtime.realtime_harness import Client, ServerProcess, connect, fixture_pcm16, silence
from tests.liveserve.realtime.test_protocol_schema import GA

QUESTION = "What is the capital of France?"
CLIP = "q_capital_espeak_24k.wav"
VOICE_CONFIG = Path(__file__).parents[3] / "configs" / "voice-cpu-tiny.yaml"
TRANSCRIBE = {"transcription": {"model": "whisper-1"}}


@pytest.fixture(scope="module")
def voice_server(tmp_path_factory) -> ServerProcess:
    """The voice config with the thinker the other server tests use (a turn takes little CPU)."""
    path = tmp_path_factory.mktemp("voice") / "voice.yaml"
    path.write_text(yaml.safe_dump({"base": str(VOICE_CONFIG), "model": {"thinker": {
        "hidden_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 32,
        "intermediate_size": 256}}}))
    with ServerProcess(path) as server:
        yield server


async def opened(ws, **session) -> Client:
    client = Client(ws)
    await client.next("session.created")
    await client.send("session.update", session={"type": "realtime", **session})
    await client.next("session.updated")
    return client


async def spoken_turn(server: ServerProcess, realtime: bool = True) -> Client:
    """The question spoken with server VAD and transcription on; every event until the reply is done."""
    async with connect(server) as ws:
        client = await opened(ws, max_output_tokens=24, audio={"input": TRANSCRIBE})
        await client.append(np.concatenate([silence(500), fixture_pcm16(CLIP), silence(1200)]), realtime=realtime)
        await client.next("response.done", timeout=60)
        return client


def reply_audio_16k(client: Client) -> list[np.ndarray]:
    """Each audio delta of the reply (one a TTS segment) at 16 kHz."""
    return [resample_poly(np.frombuffer(base64.b64decode(e["delta"]), "<i2").astype(np.float32) / 32768, 2, 3)
            .astype(np.float32) for e in client.received("response.output_audio.delta")]


def test_a_spoken_question_is_transcribed_and_answered_in_speech(voice_server):
    client = asyncio.run(spoken_turn(voice_server))
    types = [event["type"] for _, event in client.events]
    assert "error" not in types  # transcription is not reported as ignored: this pipeline has an ASR stage
    completed = client.received("conversation.item.input_audio_transcription.completed")[0]
    assert word_error_rate(QUESTION, completed["transcript"]) <= 0.17, completed["transcript"]
    assert completed["usage"]["type"] == "duration" and 2.0 < completed["usage"]["seconds"] < 4.5
    deltas = client.received("conversation.item.input_audio_transcription.delta")
    # partial transcripts gave deltas before the final's (while the user spoke, on an idle machine); they join
    # into the transcript's first words, unless the final revised a word two partials had agreed on
    assert len(deltas) >= 2 and types.index(deltas[0]["type"]) < types.index(completed["type"])
    joined = "".join(d["delta"] for d in deltas).split()
    assert word_error_rate(" ".join(completed["transcript"].split()[:len(joined)]), " ".join(joined)) <= 0.17, joined
    user_done = next(e for e in client.received("conversation.item.done") if e["item"]["role"] == "user")
    assert user_done["item"]["content"] == [{"type": "input_audio", "transcript": completed["transcript"]}]
    # the reply: the thinker's words in the transcript events, spoken in its audio
    transcript = client.received("response.output_audio_transcript.done")[0]["transcript"]
    assert transcript and transcript == "".join(e["delta"] for e in client.received("response.output_audio_transcript.delta"))
    segments = reply_audio_16k(client)
    assert segments and all(np.sqrt(np.mean(segment ** 2)) > 0.01 for segment in segments)  # above -40 dBFS
    done = client.received("response.done")[0]["response"]
    assert done["status"] in ("completed", "incomplete") and done["output"][0]["content"][0]["transcript"] == transcript
    for _, event in client.events:
        GA[event["type"]].model_validate(event)


def test_committed_audio_and_an_audio_item_are_transcribed(voice_server):
    clip = fixture_pcm16(CLIP)

    async def scenario():
        async with connect(voice_server) as ws:
            client = await opened(ws, audio={"input": {**TRANSCRIBE, "turn_detection": None}})
            await client.append(clip, realtime=False)
            await client.send("input_audio_buffer.commit")
            committed = await client.next("conversation.item.input_audio_transcription.completed")
            await client.send("response.create", response={"max_output_tokens": 4})
            answered = await client.next("response.done", timeout=60)
            await client.send("conversation.item.create", item={"type": "message", "role": "user", "content": [
                {"type": "input_audio", "audio": base64.b64encode(clip.tobytes()).decode()}]})
            created = await client.next("conversation.item.input_audio_transcription.completed")
            return client, committed, answered, created

    client, committed, answered, created = asyncio.run(scenario())
    for event in (committed, created):
        assert word_error_rate(QUESTION, event["transcript"]) <= 0.17, event["transcript"]
    # not streamed, so no partials: one delta each, the whole transcript, with the final
    deltas = client.received("conversation.item.input_audio_transcription.delta")
    assert [d["delta"] for d in deltas] == [committed["transcript"], created["transcript"]]
    assert answered["response"]["usage"]["input_tokens"] >= 10  # the transcript's tokens reached the thinker


def test_speech_over_a_reply_truncates_it_to_what_was_heard(voice_server):
    async def scenario():
        async with connect(voice_server) as ws:
            client = await opened(ws, max_output_tokens=48)
            await client.ask("Tell me about Paris.", liveserve={"ignore_eos": True})
            await client.next("response.output_audio.delta", timeout=60)
            await client.append(fixture_pcm16("q_sky_espeak_24k.wav"), realtime=False)  # a barge-in
            truncated = await client.next("conversation.item.truncated", timeout=60)
            cut = await client.next("response.done", timeout=60)
            return truncated, cut

    truncated, cut = asyncio.run(scenario())
    unheard = truncated["liveserve"]["unheard_text_tokens"]
    generated = cut["response"]["usage"]["output_token_details"]["text_tokens"]
    assert truncated["audio_end_ms"] < 4000 and 0 < unheard < generated  # some words were heard, most not
    assert cut["response"]["status"] == "cancelled"


def test_two_sessions_at_once_both_complete(voice_server):
    async def both():
        return await asyncio.gather(spoken_turn(voice_server, realtime=False), spoken_turn(voice_server, realtime=False))

    for client in asyncio.run(both()):
        completed = client.received("conversation.item.input_audio_transcription.completed")[0]
        assert word_error_rate(QUESTION, completed["transcript"]) <= 0.17, completed["transcript"]
        done = client.received("response.done")[0]["response"]
        assert done["status"] in ("completed", "incomplete") and client.received("response.output_audio.delta")


def test_a_pause_the_user_talks_through_is_not_answered_and_the_whole_turn_is(voice_server):
    """The question twice, 100 ms apart: with the clip's own trailing silence, a pause of ~400 ms inside the
    turn (the VAD ends it after 500). A reply may start at it (interaction.preemptive_reply), but none is
    sent before the turn ends, and the one that is answers everything said."""
    clip = fixture_pcm16(CLIP)

    async def scenario():
        async with connect(voice_server) as ws:
            client = await opened(ws, max_output_tokens=8, audio={"input": TRANSCRIBE})
            await client.append(np.concatenate([silence(500), clip, silence(100), clip, silence(1200)]))
            done = await client.next("response.done", timeout=60)
            return client, done

    client, done = asyncio.run(scenario())
    types = [event["type"] for _, event in client.events]
    assert types.count("response.created") == 1 and types.count("input_audio_buffer.speech_stopped") == 1
    assert types.index("input_audio_buffer.speech_stopped") < types.index("response.created")
    heard = client.received("conversation.item.input_audio_transcription.completed")[0]["transcript"]
    assert word_error_rate(f"{QUESTION} {QUESTION}", heard) <= 0.17, heard
    assert done["response"]["status"] in ("completed", "incomplete")
