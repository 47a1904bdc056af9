"""Benchmark prompts spoken by eSpeak NG: plausible, audible to Silero VAD, cached once."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from lab import speech
from lab.speech import SAMPLE_RATE, SpeechCache, SpeechError, synthesize
from liveserve.audio_io import resample
from monitor import SileroVAD
from monitor.silero import SAMPLE_RATE as VAD_RATE
from monitor.silero import WINDOW_SAMPLES

QUESTION = "What is the capital of France?"


@pytest.fixture
def count_synthesis(monkeypatch) -> list[str]:
    """Texts passed to `speech.synthesize` from now on."""
    calls: list[str] = []

    def counting(text, voice, rate):
        calls.append(text)
        return synthesize(text, voice, rate)

    monkeypatch.setattr(speech, "synthesize", counting)
    return calls


def test_a_question_is_audible_speech_of_plausible_length():
    samples = synthesize(QUESTION)
    assert samples.dtype == np.int16 and samples.ndim == 1
    assert 1.0 < len(samples) / SAMPLE_RATE < 4.0
    assert np.sqrt(np.mean(samples.astype(np.float64) ** 2)) > 500  # int16 RMS; silence is ~0


def test_silero_vad_hears_speech_in_most_windows():
    audio = resample(synthesize(QUESTION) / 32768.0, SAMPLE_RATE, VAD_RATE)
    vad = SileroVAD()
    windows = audio[: len(audio) // WINDOW_SAMPLES * WINDOW_SAMPLES].reshape(-1, WINDOW_SAMPLES)
    probabilities = np.array([vad.speech_probability(window) for window in windows])
    assert np.mean(probabilities > 0.5) > 0.7


def test_non_ascii_text_and_other_voices_are_spoken():
    assert len(synthesize("Ça va? Un café, naïve 日本語")) > SAMPLE_RATE  # > 1 s
    assert len(synthesize("Bonjour, ça va?", voice="fr")) > SAMPLE_RATE // 2


def test_faster_rate_is_shorter():
    text = "The quick brown fox jumps over the lazy dog near the river bank."
    assert len(synthesize(text, rate=350)) < 0.7 * len(synthesize(text, rate=175))


@pytest.mark.parametrize("text", ["", "   ", "..."])
def test_nothing_to_speak_is_an_error(text):
    with pytest.raises(SpeechError, match="nothing to speak"):
        synthesize(text)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"voice": "xx-nope"}, "unknown eSpeak NG voice 'xx-nope'"), ({"rate": 10}, "80..450 words per minute, got 10")],
)
def test_bad_voice_or_rate_is_an_error(kwargs, message):
    with pytest.raises(SpeechError, match=message):
        synthesize(QUESTION, **kwargs)


def test_a_library_that_cannot_load_names_the_file(tmp_path):
    missing = tmp_path / "libespeak-ng.so"
    with pytest.raises(SpeechError, match=f"cannot load the eSpeak NG library {missing}"):
        speech._ESpeak(str(missing), str(tmp_path))


def test_concurrent_calls_do_not_mix_their_audio():
    # eSpeak is not bit-exact from call to call (a few samples of jitter), so compare lengths.
    texts = ["Yes.", QUESTION, "Tell me a long story about a dragon who guards a library of old books."]
    alone = {text: len(synthesize(text)) for text in texts}
    together: list[tuple[str, int]] = []
    threads = [threading.Thread(target=lambda t=t: together.append((t, len(synthesize(t))))) for t in texts * 3]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(together) == 9
    for text, length in together:
        assert length == pytest.approx(alone[text], rel=0.01)


def test_cache_synthesizes_once_and_a_new_cache_reads_the_file(tmp_path, count_synthesis):
    directory = tmp_path / "missing" / "speech"
    cache = SpeechCache(directory)
    # First call synthesizes and creates the directory with one WAV, no temp files left.
    first = cache.speech(QUESTION)
    assert count_synthesis == [QUESTION]
    assert os.listdir(directory) == [cache.path(QUESTION).name]
    # Second call, and a fresh cache over the same directory, read the file back.
    assert np.array_equal(cache.speech(QUESTION), first)
    assert np.array_equal(SpeechCache(directory).speech(QUESTION), first)
    assert count_synthesis == [QUESTION]


def test_voice_and_rate_are_part_of_the_key(tmp_path, count_synthesis):
    default, fast, french = SpeechCache(tmp_path), SpeechCache(tmp_path, rate=250), SpeechCache(tmp_path, voice="fr")
    assert len({default.path(QUESTION), fast.path(QUESTION), french.path(QUESTION)}) == 3
    assert len(fast.speech(QUESTION)) < len(default.speech(QUESTION))
    assert len(count_synthesis) == 2 and len(list(tmp_path.glob("*.wav"))) == 2


def test_a_damaged_file_is_synthesized_again(tmp_path, count_synthesis):
    cache = SpeechCache(tmp_path)
    good = cache.speech(QUESTION)
    path = cache.path(QUESTION)
    path.write_bytes(path.read_bytes()[:1000])  # truncated mid-audio
    again = cache.speech(QUESTION)
    assert len(again) == pytest.approx(len(good), rel=0.01)
    assert np.array_equal(SpeechCache(tmp_path).speech(QUESTION), again)
    assert len(count_synthesis) == 2


def test_default_directory_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert SpeechCache().directory == tmp_path / "liveserve" / "speech"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert SpeechCache().directory == tmp_path / "home" / ".cache" / "liveserve" / "speech"
