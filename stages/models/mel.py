"""Whisper-style log-mel spectrogram of 16 kHz audio; the mel filterbank is computed here.

Frame i is the Hann-windowed 400-sample span centred on sample 160*i, with zeros
outside the audio, so T samples give exactly ceil(T/160) frames (100 Hz) and the
frames of a chunk depend only on that chunk's samples.
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
LOG_FLOOR = 1e-10
DYNAMIC_RANGE = 8.0  # log10 units below the loudest bin (80 dB)


def num_mel_frames(num_samples: int) -> int:
    """ceil(num_samples / HOP_LENGTH): one frame per started hop."""
    return -(-num_samples // HOP_LENGTH)


def log_mel(audio: torch.Tensor, n_mels: int = 80) -> torch.Tensor:
    """[T] float 16 kHz audio -> [ceil(T/160), n_mels] log10 mel energies, scaled as Whisper does."""
    if audio.dim() != 1:
        raise ValueError(f"audio must be 1-D, got shape {tuple(audio.shape)}")
    num_frames = num_mel_frames(audio.numel())
    if num_frames == 0:
        return audio.new_zeros(0, n_mels, dtype=torch.float32)
    audio = audio.to(torch.float32)
    right_pad = (num_frames - 1) * HOP_LENGTH + N_FFT // 2 - audio.numel()
    padded = F.pad(audio, (N_FFT // 2, right_pad))
    window = torch.hann_window(N_FFT, device=audio.device)
    spectrum = torch.stft(padded, N_FFT, HOP_LENGTH, window=window, center=False, return_complex=True)
    mel = mel_filters(n_mels, audio.device) @ spectrum.abs().square()
    log_spec = mel.clamp(min=LOG_FLOOR).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - DYNAMIC_RANGE)
    return ((log_spec + 4.0) / 4.0).T.contiguous()


@lru_cache(maxsize=None)
def mel_filters(n_mels: int, device: torch.device = torch.device("cpu")) -> torch.Tensor:
    """[n_mels, N_FFT//2 + 1] Slaney-scale, area-normalised triangles over 0..8 kHz (librosa's default)."""
    fft_hz = torch.linspace(0, SAMPLE_RATE / 2, N_FFT // 2 + 1, dtype=torch.float64)
    mel_points = torch.linspace(_hz_to_mel(0.0), _hz_to_mel(SAMPLE_RATE / 2), n_mels + 2, dtype=torch.float64)
    edges_hz = _mel_to_hz(mel_points)
    widths = edges_hz.diff()
    ramps = edges_hz[:, None] - fft_hz[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    triangles = torch.minimum(rising, falling).clamp(min=0.0)
    area_norm = 2.0 / (edges_hz[2:] - edges_hz[:-2])
    return (triangles * area_norm[:, None]).to(device=device, dtype=torch.float32)


# Slaney mel scale: linear below 1 kHz, logarithmic above.
_HZ_PER_MEL = 200.0 / 3
_LOG_START_HZ = 1000.0
_LOG_START_MEL = _LOG_START_HZ / _HZ_PER_MEL
_LOG_STEP = math.log(6.4) / 27.0


def _hz_to_mel(hz: float) -> float:
    if hz < _LOG_START_HZ:
        return hz / _HZ_PER_MEL
    return _LOG_START_MEL + math.log(hz / _LOG_START_HZ) / _LOG_STEP


def _mel_to_hz(mels: torch.Tensor) -> torch.Tensor:
    log_region = _LOG_START_HZ * torch.exp(_LOG_STEP * (mels - _LOG_START_MEL))
    return torch.where(mels < _LOG_START_MEL, mels * _HZ_PER_MEL, log_region)
