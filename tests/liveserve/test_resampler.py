"""The session's streaming 24 -> 16 kHz resampler: the textbook filter, whatever the chunking."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import firwin, lfilter

from liveserve.realtime.input_audio import Resampler24to16

SECOND_24K = np.random.default_rng(0).standard_normal(24000).astype(np.float32) * 0.3


def zero_stuff_filter_decimate(samples: np.ndarray, num_taps: int = 96) -> np.ndarray:
    """Up 2 by zero stuffing, low-pass at 8 kHz (gain 2), keep every third sample."""
    upsampled = np.zeros(2 * len(samples))
    upsampled[::2] = samples
    return lfilter(firwin(num_taps, 1.0 / 3.0) * 2.0, 1.0, upsampled)[::3]


def test_one_call_equals_the_textbook_filter():
    out = Resampler24to16().process(SECOND_24K)
    assert out.dtype == np.float32 and len(out) == 16000
    np.testing.assert_allclose(out, zero_stuff_filter_decimate(SECOND_24K), atol=1e-6)


@pytest.mark.parametrize("max_chunk", [1, 7, 480, 5000])
def test_the_output_does_not_depend_on_chunking(max_chunk):
    rng = np.random.default_rng(max_chunk)
    resampler, pieces, start = Resampler24to16(), [], 0
    while start < len(SECOND_24K):
        size = int(rng.integers(0, max_chunk + 1))  # empty chunks included
        pieces.append(resampler.process(SECOND_24K[start : start + size]))
        start += size
    np.testing.assert_allclose(np.concatenate(pieces), Resampler24to16().process(SECOND_24K), atol=1e-6)


def test_speech_band_passes_and_what_16k_cannot_hold_is_filtered_out():
    t = np.arange(24000) / 24000
    gain = {hz: np.abs(Resampler24to16().process(np.sin(2 * np.pi * hz * t).astype(np.float32))[2000:]).max()
            for hz in (1000, 10000)}
    assert gain[1000] == pytest.approx(1.0, abs=0.02) and gain[10000] < 0.01
