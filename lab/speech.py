"""Benchmark prompts spoken by eSpeak NG, synthesized once and cached as WAV files.

eSpeak NG is the `libespeak-ng` shared library shipped, with its data, in the
`espeakng-loader` wheel; it is called through ctypes, so no `espeak-ng` binary
is needed. Speech comes out as 1-D int16 PCM at 24 kHz mono, the realtime API's
input format.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.metadata
import json
import os
import tempfile
import threading
import wave
from pathlib import Path

import numpy as np

from liveserve.audio_io import resample

SAMPLE_RATE = 24_000
DEFAULT_VOICE = "en-us"
DEFAULT_RATE = 175  # words per minute, eSpeak's default
MIN_RATE, MAX_RATE = 80, 450  # eSpeak's documented range
CACHE_FORMAT = 1  # bump when the synthesis or the file layout changes
ESPEAK_VERSION = importlib.metadata.version("espeakng-loader")

# speak_lib.h
AUDIO_OUTPUT_SYNCHRONOUS = 2
INITIALIZE_DONT_EXIT = 0x8000
ESPEAK_RATE = 1
POS_CHARACTER = 1
CHARS_UTF8 = 1
EE_OK = 0
_SYNTH_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)

_LOCK = threading.Lock()  # libespeak-ng is one process-global, non-reentrant synthesizer


class SpeechError(RuntimeError):
    """Speech that cannot be produced, with the reason."""


def synthesize(text: str, voice: str = DEFAULT_VOICE, rate: int = DEFAULT_RATE) -> np.ndarray:
    """`text` spoken by eSpeak NG `voice` at `rate` words per minute: int16 at 24 kHz.

    Any Unicode text works (UTF-8 to eSpeak). Text with nothing to say (empty,
    blanks, punctuation only) raises SpeechError rather than returning silence,
    which a VAD would never hear as a turn. Thread-safe; calls are serialized.
    Not bit-exact: eSpeak carries state between calls, so repeats differ by a
    few samples; SpeechCache is what makes runs replay identical audio.
    """
    if not MIN_RATE <= rate <= MAX_RATE:
        raise SpeechError(f"speech rate must be {MIN_RATE}..{MAX_RATE} words per minute, got {rate}")
    with _LOCK:
        engine = _engine()
        native = engine.synthesize(text, voice, rate)
    if not native.any():
        raise SpeechError(f"eSpeak NG found nothing to speak in {text!r}")
    resampled = resample(native, engine.sample_rate, SAMPLE_RATE)
    return np.clip(np.round(resampled), -32768, 32767).astype(np.int16)


@functools.cache
def _engine() -> _ESpeak:
    """The process's one eSpeak NG instance, initialized on first use (call under _LOCK)."""
    import espeakng_loader

    try:
        data_path = espeakng_loader.get_data_path()
    except RuntimeError as exc:
        raise SpeechError(f"eSpeak NG data missing: {exc}") from None
    return _ESpeak(espeakng_loader.get_library_path(), data_path)


class _ESpeak:
    """libespeak-ng in synchronous retrieval mode: `espeak_Synth` returns once the
    synth callback has received every sample. Not thread-safe."""

    def __init__(self, library_path: str, data_path: str) -> None:
        try:
            self._lib = lib = ctypes.CDLL(library_path)
        except OSError as exc:
            raise SpeechError(f"cannot load the eSpeak NG library {library_path}: {exc}") from None
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetSynthCallback.argtypes = [_SYNTH_CALLBACK]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
                                     ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
        self.sample_rate: int = lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path.encode(), INITIALIZE_DONT_EXIT)
        if self.sample_rate <= 0:
            raise SpeechError(f"espeak_Initialize failed for {library_path} with data {data_path}")
        self._chunks: list[np.ndarray] = []
        self._callback = _SYNTH_CALLBACK(self._collect)  # kept referenced: the library holds the pointer
        lib.espeak_SetSynthCallback(self._callback)

    def _collect(self, wav, num_samples: int, _events) -> int:
        if wav and num_samples > 0:  # NULL wav marks the end; a 0-sample buffer is not the end
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(num_samples,)).copy())
        return 0  # continue

    def synthesize(self, text: str, voice: str, rate: int) -> np.ndarray:
        """int16 samples at `sample_rate`."""
        if self._lib.espeak_SetVoiceByName(voice.encode()) != EE_OK:
            raise SpeechError(f"unknown eSpeak NG voice {voice!r}")
        self._lib.espeak_SetParameter(ESPEAK_RATE, rate, 0)
        encoded = text.encode() + b"\0"
        self._chunks = []
        status = self._lib.espeak_Synth(encoded, len(encoded), 0, POS_CHARACTER, 0, CHARS_UTF8, None, None)
        if status != EE_OK:
            raise SpeechError(f"espeak_Synth failed with status {status} for {text!r}")
        return np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/liveserve/speech`, `~/.cache/liveserve/speech` when unset."""
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "liveserve" / "speech"


class SpeechCache:
    """Prompt speech synthesized once per (text, voice, rate) and kept in `directory`.

    Each prompt is one 24 kHz mono PCM16 WAV named by a SHA-256 of the format
    version, the eSpeak NG package version, text, voice and rate. Files are written to a temp file and renamed
    into place, so readers (other threads or processes sharing the directory)
    never see a partial file; at worst two writers synthesize the same prompt.
    A file that is unreadable or not 24 kHz mono PCM16 counts as missing.
    """

    def __init__(self, directory: str | Path | None = None, voice: str = DEFAULT_VOICE, rate: int = DEFAULT_RATE) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.voice = voice
        self.rate = rate

    def path(self, text: str) -> Path:
        """Where the speech of `text` is (or will be) stored."""
        key = json.dumps([CACHE_FORMAT, ESPEAK_VERSION, text, self.voice, self.rate], ensure_ascii=False)
        return self.directory / f"{hashlib.sha256(key.encode()).hexdigest()}.wav"

    def speech(self, text: str) -> np.ndarray:
        """`text` spoken as int16 at 24 kHz: read from the cache, else synthesized and stored."""
        path = self.path(text)
        samples = _read_pcm16(path)
        if samples is None:
            samples = synthesize(text, self.voice, self.rate)
            _write_pcm16_atomically(path, samples)
        return samples


def _read_pcm16(path: Path) -> np.ndarray | None:
    """The file's samples if it is a 24 kHz mono PCM16 WAV, else None."""
    try:
        with wave.open(str(path), "rb") as wav:
            if (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) != (1, 2, SAMPLE_RATE):
                return None
            num_frames = wav.getnframes()
            raw = wav.readframes(num_frames)
    except (OSError, EOFError, wave.Error):
        return None
    if len(raw) != 2 * num_frames:  # truncated
        return None
    return np.frombuffer(raw, "<i2").astype(np.int16)


def _write_pcm16_atomically(path: Path, samples: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file, wave.open(file, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)
            wav.setframerate(SAMPLE_RATE)
            wav.writeframes(samples.astype("<i2").tobytes())
        os.replace(temp, path)
    except BaseException:
        os.unlink(temp)
        raise
