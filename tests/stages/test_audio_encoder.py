import wave

import numpy as np
import pytest
import torch
from scipy.signal import resample_poly

from lab.clips import clips_dir
from stages.models.audio_encoder import AudioEncoder, AudioEncoderConfig
from stages.models.weights import init_deterministic

FIXTURES = clips_dir()
CHUNK = AudioEncoderConfig().chunk_samples  # 32000 samples = 2 s = 25 frames


def read_speech_16k(name: str) -> torch.Tensor:
    """A 24 kHz PCM16 mono fixture, resampled to 16 kHz float32."""
    with wave.open(str(FIXTURES / name)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24000, 1, 2)
        pcm = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    return torch.from_numpy(resample_poly(pcm / 32768.0, 2, 3).astype(np.float32))


def make_encoder(seed: int = 0) -> AudioEncoder:
    encoder = AudioEncoder(AudioEncoderConfig())
    init_deterministic(encoder, seed)
    return encoder.eval()


@pytest.fixture(scope="module")
def encoder() -> AudioEncoder:
    return make_encoder()


@pytest.fixture(scope="module")
def speech() -> torch.Tensor:
    audio = read_speech_16k("librivox_austen_0870_24k.wav")
    assert audio.numel() > 2 * CHUNK  # at least three chunks, the last one partial
    return audio


@pytest.mark.parametrize(
    ("num_samples", "num_frames"), [(0, 0), (1, 1), (1280, 1), (1281, 2), (CHUNK, 25), (CHUNK + 1, 26)]
)
@torch.inference_mode()
def test_one_frame_per_started_80_ms(encoder, num_samples, num_frames):
    assert encoder.num_output_frames(num_samples) == num_frames
    assert encoder(torch.randn(num_samples)).shape == (num_frames, 384)


@torch.inference_mode()
def test_speech_gives_sane_embeddings(encoder, speech):
    out = encoder(speech)
    assert out.shape == (encoder.num_output_frames(speech.numel()), 384)
    assert torch.isfinite(out).all()
    assert out.std(dim=0).min() > 0  # varies over time in every channel
    assert not torch.allclose(out, encoder(torch.zeros_like(speech)), atol=1e-3)


@torch.inference_mode()
def test_a_chunk_alone_equals_its_slice_of_the_whole(encoder, speech):
    whole = encoder(speech)
    for start in range(0, speech.numel(), CHUNK):
        chunk = speech[start : start + CHUNK]
        first = start // 1280
        alone = encoder(chunk)
        assert torch.allclose(alone, whole[first : first + alone.shape[0]], atol=1e-5)


@torch.inference_mode()
def test_a_chunk_ignores_the_other_chunks(encoder, speech):
    changed = speech.clone()
    changed[CHUNK:] = torch.randn(speech.numel() - CHUNK)
    assert torch.equal(encoder(changed)[:25], encoder(speech)[:25])
    assert not torch.allclose(encoder(changed)[25:], encoder(speech)[25:], atol=1e-3)


@torch.inference_mode()
def test_batching_with_padding_equals_one_at_a_time(encoder, speech):
    chunks = [speech[:CHUNK], speech[CHUNK : CHUNK + 12345], speech[:1], torch.zeros(0), speech[5000:25000]]
    batched = encoder.encode_chunks(chunks)
    assert [out.shape[0] for out in batched] == [25, 10, 1, 0, 16]
    for chunk, out in zip(chunks, batched):
        assert torch.allclose(out, encoder.encode_chunks([chunk])[0], atol=1e-5)


@torch.inference_mode()
def test_same_seed_same_output_other_seed_different(speech):
    audio = speech[:CHUNK]
    assert torch.equal(make_encoder(0)(audio), make_encoder(0)(audio))
    assert not torch.allclose(make_encoder(0)(audio), make_encoder(1)(audio), atol=1e-3)


def test_rejects_a_chunk_longer_than_chunk_samples(encoder):
    with pytest.raises(ValueError, match="chunk 1 has 32001 samples"):
        encoder.encode_chunks([torch.zeros(10), torch.zeros(CHUNK + 1)])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"hidden_size": 250}, r"hidden_size \(250\) must be divisible by num_heads \(4\)"),
        ({"hidden_size": 3, "num_heads": 3}, r"hidden_size \(3\) must be even"),
        ({"num_layers": 0}, r"num_layers must be a positive integer, got 0"),
        ({"chunk_frames": 2.5}, r"chunk_frames must be a positive integer, got 2.5"),
        ({"sample_rate": 24000}, r"sample_rate \(24000\) must be 16000"),
    ],
)
def test_config_validation_names_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        AudioEncoderConfig(**overrides)
