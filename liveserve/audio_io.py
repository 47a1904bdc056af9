"""WAV files in and out, and resampling; every failure is an AudioError that says why."""

from __future__ import annotations

import wave
from math import gcd
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

INT_SCALE = {1: 128.0, 2: 32768.0, 4: 2147483648.0}


class AudioError(ValueError):
    """Audio that cannot be used, with the reason."""


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """Mono float32 samples in [-1, 1] and the file's sample rate (PCM 8/16/24/32-bit)."""
    path = Path(path)
    if not path.is_file():
        raise AudioError(f"audio file not found: {path}")
    try:
        with wave.open(str(path), "rb") as wav:
            width, channels, rate = wav.getsampwidth(), wav.getnchannels(), wav.getframerate()
            raw = wav.readframes(wav.getnframes())
    except (wave.Error, EOFError) as exc:
        raise AudioError(f"unreadable WAV {path}: {exc} (expected PCM WAV)") from None
    samples = _decode_pcm(raw, width, path)
    if samples.size == 0:
        raise AudioError(f"{path} contains no audio")
    return samples.reshape(-1, channels).mean(axis=1).astype(np.float32), rate


def _decode_pcm(raw: bytes, width: int, path: Path) -> np.ndarray:
    if width == 3:
        padded = np.frombuffer(raw, np.uint8).reshape(-1, 3)
        ints = (padded[:, 0].astype(np.int32) | padded[:, 1].astype(np.int32) << 8 | padded[:, 2].astype(np.int32) << 16)
        return (np.where(ints >= 1 << 23, ints - (1 << 24), ints) / float(1 << 23)).astype(np.float32)
    if width not in INT_SCALE:
        raise AudioError(f"{path}: unsupported sample width of {width} bytes")
    if width == 1:
        return (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    dtype = {2: np.int16, 4: np.int32}[width]
    return (np.frombuffer(raw, dtype).astype(np.float32) / INT_SCALE[width]).astype(np.float32)


def resample(samples: np.ndarray, source_rate: int, target_rate: int) -> np.ndarray:
    """Polyphase resampling with an anti-aliasing filter; identity when the rates match."""
    if source_rate <= 0:
        raise AudioError(f"invalid sample rate {source_rate}")
    if source_rate == target_rate:
        return samples.astype(np.float32)
    common = gcd(source_rate, target_rate)
    return resample_poly(samples, target_rate // common, source_rate // common).astype(np.float32)


def write_wav(path: str | Path, samples: np.ndarray, sample_rate: int) -> None:
    """Write mono PCM16."""
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype("<i2")
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm.tobytes())
