"""The Whisper-style log-mel features Smart Turn reads, checked against facts and torch, not against a copy."""
import numpy as np
import pytest
import torch

from monitor.log_mel import hz_to_mel, log_mel, mel_filters, mel_to_hz, power_spectrogram


def test_the_slaney_scale_is_linear_to_1_khz_then_logarithmic():
    assert hz_to_mel([0.0, 200.0, 1000.0]).tolist() == pytest.approx([0.0, 3.0, 15.0])
    assert hz_to_mel(6400.0) == pytest.approx(15 + 27)  # 27 mel per factor of 6.4
    hz = np.array([50.0, 999.0, 1000.0, 3000.0, 8000.0])
    assert mel_to_hz(hz_to_mel(hz)) == pytest.approx(hz)


def test_each_mel_filter_is_a_triangle_of_unit_area_and_they_tile_the_band():
    filters = mel_filters()
    assert filters.shape == (80, 201) and (filters >= 0).all()
    bin_hz = 16000 / 400
    areas = filters.sum(axis=1) * bin_hz
    assert areas == pytest.approx(1.0, rel=0.1)  # sampled at 40 Hz bins, so only about 1
    peaks = filters.argmax(axis=1)
    assert (np.diff(peaks) >= 0).all() and peaks[-1] > 190


def test_the_power_spectrogram_is_torchs_centred_stft_less_its_last_frame():
    audio = np.random.default_rng(0).standard_normal(16000).astype(np.float32)
    ours = power_spectrogram(audio)
    stft = torch.stft(torch.from_numpy(audio), 400, 160, window=torch.hann_window(400), return_complex=True,
                      center=True, pad_mode="reflect")
    theirs = stft.abs().pow(2)[:, :-1].numpy()
    assert ours.shape == theirs.shape == (201, 100)
    assert np.abs(ours - theirs).max() <= 1e-3 * np.abs(theirs).max()


def test_log_mel_has_the_model_input_shape_range_and_puts_a_tone_in_its_band():
    t = np.arange(8 * 16000) / 16000
    tone = (0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    features = log_mel(tone)
    assert features.shape == (80, 800) and features.dtype == np.float32
    assert features.max() - features.min() <= 2.0 + 1e-6  # clamped 8 decades below the peak, then / 4
    band = int(np.argmax(features[:, 400]))
    assert mel_to_hz(np.linspace(0, hz_to_mel(8000), 82))[band + 1] == pytest.approx(1000, rel=0.1)
