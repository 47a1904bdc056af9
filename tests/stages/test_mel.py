import math

import pytest
import torch

from stages.models.mel import DYNAMIC_RANGE, HOP_LENGTH, N_FFT, SAMPLE_RATE, log_mel, mel_filters


def sine(hz: float, seconds: float = 1.0) -> torch.Tensor:
    t = torch.arange(int(SAMPLE_RATE * seconds), dtype=torch.float64) / SAMPLE_RATE
    return (0.5 * torch.sin(2 * math.pi * hz * t)).float()


@pytest.mark.parametrize(
    ("num_samples", "num_frames"), [(0, 0), (1, 1), (160, 1), (161, 2), (16000, 100), (32000, 200)]
)
def test_one_frame_per_started_hop(num_samples, num_frames):
    assert log_mel(torch.zeros(num_samples)).shape == (num_frames, 80)


def test_a_frame_sees_only_samples_within_half_a_window_of_its_centre():
    # Frame i is centred on sample 160*i and reaches 200 either side, so cutting the
    # audio at 1600 keeps frames 0..8 (reaching at most 1480) and changes frame 9.
    # White noise spans far less than the 80 dB clamp, so no value is clamped.
    audio = torch.randn(3200)
    whole, prefix = log_mel(audio), log_mel(audio[:1600])
    assert torch.allclose(whole[:9], prefix[:9], atol=1e-5)
    assert not torch.allclose(whole[9], prefix[9], atol=1e-3)


@pytest.mark.parametrize("hz", [440.0, 1000.0, 3000.0])
def test_sine_peaks_at_the_mel_bin_whose_centre_is_nearest(hz):
    filters = mel_filters(80)
    peak = log_mel(sine(hz)).mean(dim=0).argmax()
    fft_bin = round(hz * N_FFT / SAMPLE_RATE)
    assert peak == filters[:, fft_bin].argmax()
    centre_hz = filters[peak].argmax().item() * SAMPLE_RATE / N_FFT
    assert abs(centre_hz - hz) <= 2 * SAMPLE_RATE / N_FFT


def test_dynamic_range_is_clamped_to_80_db():
    mel = log_mel(sine(1000.0))
    assert torch.isfinite(mel).all()
    assert mel.max() - mel.min() <= DYNAMIC_RANGE / 4 + 1e-6


def test_silence_is_constant_and_finite():
    mel = log_mel(torch.zeros(HOP_LENGTH * 5))
    assert torch.isfinite(mel).all() and bool((mel == mel[0, 0]).all())


def test_filterbank_is_cached_nonnegative_and_has_no_empty_filter():
    filters = mel_filters(80, torch.device("cpu"))
    assert filters is mel_filters(80, torch.device("cpu"))
    assert filters.shape == (80, N_FFT // 2 + 1)
    assert (filters >= 0).all() and (filters.sum(dim=1) > 0).all()
    assert mel_filters(128).shape == (128, N_FFT // 2 + 1)


def test_first_filter_has_the_slaney_value():
    # Edges 0, 37.24, 74.48 Hz (0.5586 mel apart); the 40 Hz bin is on the falling
    # side: (74.48 - 40) / 37.24 * 2 / 74.48 (area norm) = 0.02486, as in librosa/Whisper.
    assert mel_filters(80)[0, 1].item() == pytest.approx(0.024862593, rel=1e-5)


def test_rejects_batched_audio():
    with pytest.raises(ValueError, match="1-D"):
        log_mel(torch.zeros(2, 160))
