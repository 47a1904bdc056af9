"""Whisper-style log-mel features of 16 kHz audio, in numpy.

The recipe (Radford et al., "Robust Speech Recognition via Large-Scale Weak Supervision", and the
Whisper feature extractor's documented parameters): a periodic Hann window of 400 samples (25 ms),
hop 160 (10 ms), the signal reflect-padded by 200 on both sides so frame k is centred on sample 160k,
power spectrum, 80 triangular mel filters on the Slaney scale with Slaney (area) normalisation from
0 Hz to 8 kHz, log10 of the filter energies floored at 1e-10, values below (max - 8) raised to it,
then (x + 4) / 4. The last frame is dropped, so n samples give n // 160 frames.

Computed in float64, as the Whisper feature extractor Smart Turn was trained with does: float32 features differ
from it by up to 1e-5, and on some inputs that moves Smart Turn's probability by 0.1.
"""
from __future__ import annotations

import functools

import numpy as np

SAMPLE_RATE = 16_000
N_FFT = 400
HOP = 160
N_MELS = 80
LINEAR_MEL_HZ = 1000.0  # the Slaney scale is linear below this, logarithmic above
MELS_PER_HZ_LINEAR = 3.0 / 200.0
LOG_STEP = np.log(6.4) / 27.0  # log-Hz per mel above LINEAR_MEL_HZ


def hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: 3/200 mel per Hz up to 1 kHz (15 mel), then 27 mel per factor of 6.4."""
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz * MELS_PER_HZ_LINEAR
    knee = LINEAR_MEL_HZ * MELS_PER_HZ_LINEAR
    logarithmic = knee + np.log(np.maximum(hz, LINEAR_MEL_HZ) / LINEAR_MEL_HZ) / LOG_STEP
    return np.where(hz >= LINEAR_MEL_HZ, logarithmic, linear)


def mel_to_hz(mel: np.ndarray) -> np.ndarray:
    """The inverse of `hz_to_mel`."""
    mel = np.asarray(mel, dtype=np.float64)
    knee = LINEAR_MEL_HZ * MELS_PER_HZ_LINEAR
    return np.where(mel >= knee, LINEAR_MEL_HZ * np.exp(LOG_STEP * (mel - knee)), mel / MELS_PER_HZ_LINEAR)


@functools.lru_cache(maxsize=None)
def mel_filters(n_mels: int = N_MELS, n_fft: int = N_FFT, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] triangular filters, centres equally spaced in mel between 0 and the
    Nyquist frequency; each filter is scaled by 2 / (its upper edge - its lower edge) in Hz, so every
    triangle has unit area."""
    bins_hz = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    edges_hz = mel_to_hz(np.linspace(0.0, hz_to_mel(sample_rate / 2), n_mels + 2))
    lower, centre, upper = edges_hz[:-2, None], edges_hz[1:-1, None], edges_hz[2:, None]
    rising = (bins_hz - lower) / (centre - lower)
    falling = (upper - bins_hz) / (upper - centre)
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return weights * (2.0 / (upper - lower))


@functools.lru_cache(maxsize=None)
def _hann(n: int) -> np.ndarray:
    """The periodic Hann window (as for spectral analysis): 0.5 - 0.5 cos(2 pi k / n), k < n."""
    return 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)


def power_spectrogram(audio: np.ndarray) -> np.ndarray:
    """[n_fft // 2 + 1, len(audio) // HOP] float64 power spectra of centred, Hann-windowed frames."""
    audio = np.asarray(audio, dtype=np.float64)
    if audio.ndim != 1 or len(audio) < N_FFT:
        raise ValueError(f"audio must be 1-D with at least {N_FFT} samples, got shape {audio.shape}")
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    num_frames = len(audio) // HOP
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:num_frames]
    spectrum = np.fft.rfft(frames * _hann(N_FFT), axis=1)
    return (spectrum.real ** 2 + spectrum.imag ** 2).T


def log_mel(audio: np.ndarray) -> np.ndarray:
    """[80, len(audio) // 160] float32 log-mel features of mono 16 kHz audio (see the module doc)."""
    energies = mel_filters() @ power_spectrogram(audio)
    log_spec = np.log10(np.maximum(energies, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)
