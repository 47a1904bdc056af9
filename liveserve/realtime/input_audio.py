"""Input audio on the wire: base64 24 kHz PCM16 in and out, resampled to the 16 kHz the models hear."""

from __future__ import annotations

import base64
import binascii

import numpy as np
from scipy.signal import firwin

from liveserve.realtime.errors import RealtimeError

MAX_APPEND_BYTES = 15 * 1024 * 1024
DECODE_SLICE_CHARS = 256 * 1024  # base64 decoded per call (a multiple of 4): ~0.6 ms of it


class Resampler24to16:
    """Streaming 24 kHz -> 16 kHz (up 2, low-pass, down 3) whose output does not depend on chunking.

    Polyphase: output m is sum_i taps[2i + m % 2] * x[3m // 2 - i], so only kept outputs
    and nonzero (not zero-stuffed) inputs are computed. Outputs 2j and 2j + 1 read inputs 3j - span + 1 .. 3j + 1
    (one window of span + 1), so each pair is one row of a strided view times a two-column kernel, and a call is
    one matrix product.
    """

    def __init__(self, num_taps: int = 96) -> None:
        taps = (firwin(num_taps, 1.0 / 3.0) * 2.0).astype(np.float32)
        self.span = num_taps // 2  # inputs per output
        self.kernel = np.zeros((self.span + 1, 2), dtype=np.float32)  # reversed: dot with a window in time order
        self.kernel[:-1, 0], self.kernel[1:, 1] = taps[0::2][::-1], taps[1::2][::-1]
        self.tail = np.zeros(self.span + 2, dtype=np.float32)  # the last inputs (zeros before the first)
        self.num_in = 0
        self.num_out = 0

    def process(self, samples: np.ndarray) -> np.ndarray:
        if not len(samples):
            return np.zeros(0, dtype=np.float32)
        buf = np.concatenate([self.tail, samples.astype(np.float32, copy=False), np.zeros(2, dtype=np.float32)])
        end = -(-2 * (self.num_in + len(samples)) // 3)  # outputs whose inputs have all arrived
        first, last = self.num_out // 2, (end - 1) // 2  # the pairs holding outputs num_out .. end - 1
        start = 3 * first - self.num_in + len(self.tail) - self.span + 1  # pair `first`'s window in buf
        step = buf.strides[0]
        rows = np.ndarray((last - first + 1, self.span + 1), np.float32, buf, start * step, (3 * step, step))
        out = np.dot(rows, self.kernel).ravel()[self.num_out - 2 * first : end - 2 * first]
        self.tail = buf[len(buf) - 2 - len(self.tail) : len(buf) - 2]
        self.num_in += len(samples)
        self.num_out = end
        return out


def num_pcm16_samples(audio_b64: object) -> int:
    """How many samples base64 PCM16 decodes to, read from its length, so a payload is judged before
    it is decoded (0 for anything but a string: its decoding says what is wrong with it); RealtimeError
    past MAX_APPEND_BYTES."""
    if not isinstance(audio_b64, str):
        return 0
    if len(audio_b64) * 3 // 4 > MAX_APPEND_BYTES:
        raise RealtimeError("audio_too_large", f"an append may carry at most {MAX_APPEND_BYTES} bytes of audio",
                            "audio")
    return (len(audio_b64) * 3 // 4 - audio_b64[-2:].count("=")) // 2


def decode_pcm16(audio_b64: object) -> np.ndarray:
    """Base64 PCM16 -> float32 in [-1, 1]; RealtimeError for anything else.

    Decoded DECODE_SLICE_CHARS at a time: base64 decoding holds the interpreter lock, and on a worker
    thread a whole big append would hold the event loop for as long (~15 ms per 100 s of audio).
    """
    if not isinstance(audio_b64, str):
        raise RealtimeError("invalid_type", "audio must be a base64 string", "audio")
    num_pcm16_samples(audio_b64)
    try:
        if audio_b64.find("=", 0, len(audio_b64) - 2) != -1:  # padding before the end (a slice would pass it)
            raise ValueError("padding inside the audio")
        raw = b"".join(base64.b64decode(audio_b64[start : start + DECODE_SLICE_CHARS], validate=True)
                       for start in range(0, len(audio_b64), DECODE_SLICE_CHARS))
    except (binascii.Error, ValueError):
        raise RealtimeError("invalid_base64", "audio is not valid base64", "audio") from None
    if len(raw) % 2:
        raise RealtimeError("invalid_audio", "PCM16 audio must have an even number of bytes", "audio")
    return np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0


def encode_pcm16(samples: np.ndarray) -> str:
    pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype("<i2")
    return base64.b64encode(pcm.tobytes()).decode("ascii")
