"""Qwen3-Omni served by LiveServe's stages equals transformers' reference on tiny random folders of several shapes:
the reply's text ids and codec codes exactly, the waveform to 30 dB SNR, for a text turn, a spoken turn, a second
turn on the resident context and a turn after a barge-in cut the reply to what was heard."""

import asyncio
import math

import numpy as np
import pytest
import torch

from lab.qwen3_omni.tiny_folder import SHAPES, write_tiny_folder
from stages.models.qwen3_omni.code2wav import SAMPLE_RATE
from tests.lab.qwen3_omni.reference import ReferenceOmni
from tests.liveserve.qwen3_omni.served import ServedOmni, ServedReply

THINKER_MAX, TALKER_MAX = 12, 40
FOLDERS = [("tiny-a", 3), ("tiny-b", 11), ("tiny-c", 5)]


@pytest.fixture(scope="module", params=FOLDERS, ids=[f"{shape}-seed{seed}" for shape, seed in FOLDERS])
def folder(request, tmp_path_factory):
    shape, seed = request.param
    return write_tiny_folder(tmp_path_factory.mktemp(shape), SHAPES[shape], seed)


@pytest.fixture(scope="module")
def reference(folder):
    return ReferenceOmni.load(folder)


def snr_db(reference: np.ndarray, ours: np.ndarray) -> float:
    n = min(len(reference), len(ours))
    noise = float(np.sum((reference[:n] - ours[:n]) ** 2))
    return math.inf if noise == 0 else 10 * math.log10(float(np.sum(reference[:n] ** 2)) / noise)


def assert_matches(reference: ReferenceOmni, served: ServedReply, **features) -> None:
    expected = reference.reply(torch.tensor([served.prompt_ids]), thinker_max_new_tokens=THINKER_MAX,
                               talker_max_new_tokens=TALKER_MAX, **features)
    assert len(expected.text_token_ids) > 1 and expected.codes.shape[1] > 1  # a reply to compare, not an empty one
    assert served.text_token_ids == expected.text_token_ids
    assert torch.equal(served.codes, expected.codes)
    wav = expected.wav.numpy()
    trailing = reference.model.code2wav.total_upsample
    assert len(wav) - trailing <= len(served.wav) <= len(wav) + trailing
    assert snr_db(wav, served.wav) >= 30


def serve(folder, monkeypatch, *turns: dict) -> list[ServedReply]:
    """The replies to `turns` (ServedOmni.turn's arguments each), one after the other in one session."""
    async def scenario():
        async with ServedOmni(folder, THINKER_MAX, TALKER_MAX, monkeypatch) as omni:
            return [await omni.turn(**turn) for turn in turns]
    return asyncio.run(scenario())


def test_a_text_turn(folder, reference, monkeypatch):
    [served] = serve(folder, monkeypatch, {"text": "Hello there, who are you?"})
    prompt = reference.prompt_ids([{"role": "user", "content": "Hello there, who are you?"}])
    assert served.prompt_ids == prompt.input_ids[0].tolist()  # the folder's chat template, as LiveServe lays it out
    assert_matches(reference, served)


def test_a_spoken_turn(folder, reference, speech_16k, monkeypatch):
    [served] = serve(folder, monkeypatch, {"audio": speech_16k})
    prompt = reference.prompt_ids([{"role": "user", "content": [{"type": "audio", "audio": "clip"}]}], speech_16k)
    assert served.prompt_ids == prompt.input_ids[0].tolist()
    assert_matches(reference, served, input_features=prompt.input_features,
                   feature_attention_mask=prompt.feature_attention_mask)


def test_a_second_turn_on_the_resident_context(folder, reference, monkeypatch):
    first, second = serve(folder, monkeypatch, {"text": "Hello there, who are you?"}, {"text": "And what do you do?"})
    assert second.prompt_ids[: len(first.prompt_ids) + len(first.text_token_ids)] == (
        first.prompt_ids + first.text_token_ids)
    assert_matches(reference, second)


def test_a_turn_after_a_barge_in(folder, reference, monkeypatch):
    frame_ms = 1000 * reference.model.code2wav.total_upsample / SAMPLE_RATE
    cut, after = serve(folder, monkeypatch, {"text": "Hello there, who are you?", "cancel_at_ms": 3.5 * frame_ms},
                       {"text": "Sorry, go on."})
    assert cut.status == "cancelled"
    heard = cut.text_token_ids[:4]  # the tokens whose frames had started playing 3.5 frames in
    im_end = reference.model.config.im_end_token_id
    assert after.prompt_ids[len(cut.prompt_ids): len(cut.prompt_ids) + 5] == heard + [im_end]
    assert_matches(reference, after)


def test_sessions_served_at_once_each_get_the_references_reply(folder, reference, monkeypatch):
    prompts = ["Hello there, who are you?", "Tell me a story.", "What is the capital of France?", "Why?"]

    async def scenario():
        async with ServedOmni(folder, THINKER_MAX, TALKER_MAX, monkeypatch) as omni:
            return await asyncio.gather(*(omni.turn(text, session=f"s{i}") for i, text in enumerate(prompts)))

    for served in asyncio.run(scenario()):  # batched together in every stage, each one's reply is its own
        assert_matches(reference, served)
