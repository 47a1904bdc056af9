import pytest
import torch
import torch.nn.functional as F

from stages.models.vocoder import Vocoder, VocoderConfig
from stages.models.weights import init_deterministic
from stages.requests import VocoderRequest

SPF = 1920
# A small config with a short frame, so the sample conv (8 samples back) reaches a
# whole previous frame and chunk joins are exercised at every frame boundary.
SHORT_FRAMES = VocoderConfig(
    samples_per_frame=8, sample_kernel=9, hidden_size=32, num_frame_layers=2, frame_kernel=2
)


def make_vocoder(seed: int = 0, config: VocoderConfig = VocoderConfig()) -> Vocoder:
    vocoder = Vocoder(config)
    init_deterministic(vocoder, seed)
    return vocoder.eval()


@pytest.fixture(scope="module")
def vocoder() -> Vocoder:
    return make_vocoder()


@pytest.fixture(scope="module")
def frames() -> torch.Tensor:
    return torch.randint(0, 1024, (60,), generator=torch.Generator().manual_seed(7))


def decode_in_chunks(vocoder: Vocoder, frames: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Decode `frames` chunk by chunk, each with up to left_context_frames of context."""
    pieces, start = [], 0
    for size in sizes:
        num_context = min(start, vocoder.left_context_frames)
        pieces.append(vocoder.decode_chunk(frames[start - num_context : start + size], num_context))
        start += size
    assert start == len(frames)
    return torch.cat(pieces)


def test_left_context_covers_frame_convs_and_one_frame_for_the_sample_conv(vocoder):
    assert vocoder.left_context_frames == 2 * (1 + 2 + 4) + 1 == 15
    assert Vocoder(SHORT_FRAMES).left_context_frames == 1 * (1 + 2) + 1
    assert Vocoder(VocoderConfig(sample_kernel=1)).left_context_frames == 14


def plain_convolutions(vocoder: Vocoder, frames: torch.Tensor) -> torch.Tensor:
    """The vocoder written with torch's own dilated and sample-level Conv1d over the whole sequence."""
    x = vocoder.embed(frames)[None]
    for norm, conv in zip(vocoder.frame_norms, vocoder.frame_convs):
        h = F.pad(F.gelu(norm(x)).transpose(1, 2), (conv.dilation[0] * (conv.kernel_size[0] - 1), 0))
        x = x + conv(h).transpose(1, 2)
    upsampled = F.gelu(vocoder.upsample(vocoder.out_norm(x)[0]))
    channels = vocoder.config.sample_channels
    wave = upsampled.view(len(frames), channels, -1).transpose(0, 1).reshape(channels, -1)
    return torch.tanh(vocoder.sample_conv(F.pad(wave, (vocoder.config.sample_kernel - 1, 0))))[0]


@torch.inference_mode()
@pytest.mark.parametrize("config", [VocoderConfig(), SHORT_FRAMES], ids=["default", "short_frames"])
def test_equals_plain_convolutions(config, frames):
    vocoder = make_vocoder(0, config)
    assert torch.allclose(vocoder(frames), plain_convolutions(vocoder, frames), atol=1e-6, rtol=0)


@torch.inference_mode()
@pytest.mark.parametrize("num_frames", [0, 1, 5])
def test_one_frame_gives_samples_per_frame_samples(vocoder, frames, num_frames):
    assert vocoder(frames[:num_frames]).shape == (num_frames * SPF,)


@torch.inference_mode()
def test_output_is_bounded_varied_and_finite(vocoder, frames):
    audio = vocoder(frames)
    assert torch.isfinite(audio).all()
    assert audio.abs().max() <= 1.0
    assert audio.std() > 1e-3
    assert audio.view(-1, SPF).std(dim=1).min() > 0  # every frame has a waveform


@torch.inference_mode()
@pytest.mark.parametrize("schedule", ["4,16,16,rest", "1,1,1,..."])
@pytest.mark.parametrize("config", [VocoderConfig(), SHORT_FRAMES], ids=["default", "short_frames"])
def test_chunked_output_equals_whole_sequence(schedule, config, frames):
    vocoder = make_vocoder(0, config)
    sizes = [4, 16, 16, len(frames) - 36] if schedule == "4,16,16,rest" else [1] * len(frames)
    whole, chunked = vocoder(frames), decode_in_chunks(vocoder, frames, sizes)
    # Not bitwise: a few 1e-8 apart on this machine (x86, torch 2.13 CPU), as BLAS
    # blocks a GEMM differently for a different number of rows.
    assert torch.allclose(chunked, whole, atol=1e-6, rtol=0)


@torch.inference_mode()
def test_one_frame_less_context_changes_only_the_first_samples(vocoder, frames):
    # With 14 context frames, frame 30 still sees its 14 predecessors, but frame 29
    # (whose last 8 samples the sample conv reads) does not: left_context_frames is tight.
    whole = vocoder(frames)[30 * SPF : 40 * SPF]
    short = vocoder.decode_chunk(frames[16:40], 14)
    assert not torch.allclose(short[:8], whole[:8], atol=1e-4)
    assert torch.allclose(short[8:], whole[8:], atol=1e-6, rtol=0)


@torch.inference_mode()
def test_appending_frames_never_changes_samples_already_produced(vocoder, frames):
    whole = vocoder(frames)
    for n in (1, 2, 17, 40):
        assert torch.allclose(vocoder(frames[:n]), whole[: n * SPF], atol=1e-6, rtol=0)


@torch.inference_mode()
def test_batched_chunks_equal_one_at_a_time(vocoder, frames):
    chunks = [(frames[:4], 0), (frames[0:36], 15), (frames[44:45], 0), (frames[10:11], 1), (frames[:60], 44)]
    batched = vocoder.decode_chunks(chunks)
    assert [len(out) for out in batched] == [4 * SPF, 21 * SPF, SPF, 0, 16 * SPF]
    for chunk, out in zip(chunks, batched):
        assert torch.allclose(out, vocoder.decode_chunk(*chunk), atol=1e-6, rtol=0)


@torch.inference_mode()
def test_same_seed_same_output_other_seed_different(frames):
    assert torch.equal(make_vocoder(0)(frames[:8]), make_vocoder(0)(frames[:8]))
    assert not torch.allclose(make_vocoder(0)(frames[:8]), make_vocoder(1)(frames[:8]), atol=1e-3)


@pytest.mark.parametrize(
    ("frames", "num_context", "message"),
    [
        (torch.tensor([1, 2]), 3, r"num_context \(3\) must be in \[0, 2\]"),
        (torch.tensor([1, 1024]), 0, r"frame ids must be in \[0, 1024\)"),
        (torch.tensor([-1]), 0, r"frame ids must be in"),
        (torch.tensor([1.0]), 0, "integer"),
        (torch.tensor([[1]]), 0, "1-D"),
    ],
)
def test_rejects_bad_chunks(vocoder, frames, num_context, message):
    with pytest.raises(ValueError, match=message):
        vocoder.decode_chunk(frames, num_context)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"hidden_size": 0}, r"hidden_size must be a positive integer, got 0"),
        ({"frame_kernel": -3}, r"frame_kernel must be a positive integer, got -3"),
        ({"samples_per_frame": 1920.0}, r"samples_per_frame must be a positive integer, got 1920.0"),
        ({"samples_per_frame": 4}, r"sample_kernel \(9\) must be at most samples_per_frame \+ 1 \(5\)"),
    ],
)
def test_config_validation_names_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        VocoderConfig(**overrides)


def test_a_vocoder_request_counts_its_decoded_frames_audio():
    request = VocoderRequest("r", 0.0, left_context=2, frame_ms=80.0)
    request.append([1, 2, 3, 4, 5])
    request.advance(4, torch.zeros(4 * SPF))
    request.advance(1, torch.zeros(SPF))
    assert request.audio_ms == 400.0
