"""Heavy input costs the event loop little: audio judged by its length before it is decoded, decoded in
slices, a connection's messages read at a bounded rate (IngestPacer)."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import pytest

from liveserve.realtime.errors import RealtimeError
from liveserve.realtime.ingest_pacer import IngestPacer
from liveserve.realtime.input_audio import DECODE_SLICE_CHARS, decode_pcm16, num_pcm16_samples
from tests.liveserve.realtime.interaction_harness import InteractionHarness
from tests.orchestrator.conftest import tiny_pipeline


def b64(samples: np.ndarray) -> str:
    return base64.b64encode(samples.astype("<i2").tobytes()).decode()


@pytest.mark.parametrize("num_samples", [0, 1, 2, 3, 24_000, DECODE_SLICE_CHARS // 2 + 1, 5 * DECODE_SLICE_CHARS // 8])
def test_audio_is_counted_from_its_length_and_decoded_in_slices_to_the_same_samples(num_samples):
    pcm = np.random.default_rng(num_samples).integers(-32768, 32767, num_samples)
    audio = b64(pcm)
    assert num_pcm16_samples(audio) == num_samples
    np.testing.assert_array_equal(decode_pcm16(audio), pcm.astype(np.float32) / 32768.0)


@pytest.mark.parametrize("where", [0, DECODE_SLICE_CHARS + 8, -8])
def test_bad_base64_is_found_in_any_slice(where):
    audio = list(b64(np.zeros(DECODE_SLICE_CHARS, np.int16)))
    audio[where] = "@"
    with pytest.raises(RealtimeError, match="not valid base64"):
        decode_pcm16("".join(audio))


@pytest.mark.parametrize("first_samples", [1, DECODE_SLICE_CHARS * 3 // 8 - 1])  # padding inside, at a slice's end
def test_padding_inside_the_audio_is_bad_base64(first_samples):
    first = b64(np.zeros(first_samples, np.int16))
    assert first.endswith("=") and len(first) % DECODE_SLICE_CHARS in (4, 0)
    with pytest.raises(RealtimeError, match="not valid base64"):
        decode_pcm16(first + b64(np.ones(100, np.int16)))


def test_the_pacer_lets_a_burst_through_then_paces_to_its_rate():
    pacer = IngestPacer(rate=100.0, burst=300.0)
    assert [pacer.took(100, 0.0), pacer.took(200, 0.0)] == [0.0, 0.0]  # the burst
    assert pacer.took(50, 0.0) == pytest.approx(0.5)  # 50 bytes over: half a second at 100/s
    assert pacer.took(50, 0.5) == pytest.approx(0.5)  # refilled 50, spent 50: still 50 over
    assert pacer.took(10, 10.0) == 0.0  # idle long enough: a full bucket again (never more than the burst)
    assert pacer.took(300, 10.0) == pytest.approx(0.1)


def run(scenario):
    async def harnessed():
        async with InteractionHarness(tiny_pipeline()) as harness:
            return await scenario(harness)
    return asyncio.run(harnessed())


def test_an_append_past_the_buffer_or_an_item_past_its_length_is_refused_before_it_is_decoded():
    not_base64 = "@" * (4 * 24_000 * 121 // 3 * 2)  # 121 s of audio by its length; decoding it would fail

    async def scenario(h):
        await h.client("session.update", session={"audio": {"input": {"turn_detection": None}}})
        await h.client("input_audio_buffer.append", audio=not_base64)
        await h.client("conversation.item.create", item={"role": "user", "content": [
            {"type": "input_audio", "audio": not_base64}]})
        await h.client("input_audio_buffer.append", audio="@@@@")  # a small one is decoded: it is not base64
        return [e["error"]["code"] for e in h.of_type("error")]

    assert run(scenario) == ["input_audio_buffer_full", "audio_too_long", "invalid_base64"]


def test_a_big_item_of_audio_is_decoded_off_the_event_loop_and_enters_the_context():
    speech = (0.3 * 32767 * np.sin(np.arange(24_000 * 3) / 24_000 * 2 * np.pi * 220)).astype(np.int16)

    async def scenario(h):
        await h.client("conversation.item.create", item={"id": "big", "role": "user", "content": [
            {"type": "input_audio", "audio": b64(speech)}]})
        for _ in range(200):  # the worker thread decodes and resamples 3 s of audio
            if h.stages.added("encoder"):
                break
            await asyncio.sleep(0.01)
        return h.stages.added("encoder"), h.of_type("conversation.item.added")

    encoding, added = run(scenario)
    assert added[0]["item"]["id"] == "big" and [e.generation for e in encoding] == ["big"]
