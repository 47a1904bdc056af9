"""The realtime wire format for audio: 24 kHz mono PCM16 little-endian, base64 in JSON."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np

from liveserve.audio_io import read_wav, resample, write_wav

SAMPLE_RATE = 24000
BYTES_PER_MS = SAMPLE_RATE * 2 / 1000


def load_pcm16(path: str | Path) -> np.ndarray:
    """A WAV file (any rate, PCM) as 24 kHz mono int16; AudioError if unusable."""
    samples, rate = read_wav(path)
    return to_pcm16(resample(samples, rate, SAMPLE_RATE))


def write_pcm16(path: str | Path, pcm: bytes) -> None:
    """Write little-endian PCM16 bytes as a 24 kHz mono WAV (exact round trip)."""
    write_wav(path, np.frombuffer(pcm, "<i2").astype(np.float32) / 32767.0, SAMPLE_RATE)


def to_pcm16(samples: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] as int16 (clipped)."""
    return (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype(np.int16)


def silence(ms: float) -> np.ndarray:
    return np.zeros(round(SAMPLE_RATE * ms / 1000), np.int16)


def pcm16_ms(num_bytes: int) -> float:
    """Duration of `num_bytes` of wire audio."""
    return num_bytes / BYTES_PER_MS


def encode_audio(pcm: np.ndarray) -> str:
    """int16 samples -> base64 of their little-endian bytes."""
    return base64.b64encode(pcm.astype("<i2").tobytes()).decode("ascii")


def decode_audio(b64: str) -> bytes:
    """base64 -> PCM16 bytes; ValueError if not base64 or an odd number of bytes."""
    raw = base64.b64decode(b64, validate=True)
    if len(raw) % 2:
        raise ValueError(f"audio payload of {len(raw)} bytes is not whole PCM16 samples")
    return raw
