"""code2wav reused from transformers: a whole sequence as the reference decodes it, and chunks with left context
that join into it."""

import math

import pytest
import torch

from stages.models.qwen3_omni.code2wav import Code2Wav

NUM_FRAMES = 60
LEFT_CONTEXT = 25


def random_codes(code2wav: Code2Wav, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, code2wav.config.codebook_size, (code2wav.config.num_quantizers, NUM_FRAMES), generator=gen)


def snr_db(reference: torch.Tensor, other: torch.Tensor) -> float:
    reference, other = reference.double(), other.double()
    return 10 * math.log10(float((reference**2).sum() / ((reference - other) ** 2).sum()))


def test_a_whole_sequence_decodes_as_the_references_chunked_decode(tiny):
    code2wav = Code2Wav.from_folder(tiny.folder)
    codes = random_codes(code2wav)
    with torch.no_grad():
        expected = tiny.reference.code2wav.chunked_decode(codes[None], chunk_size=300, left_context_size=25)
    torch.testing.assert_close(code2wav.decode(codes, left_context=0), expected.flatten(), atol=1e-6, rtol=0)
    assert code2wav.samples_per_frame == int(tiny.reference.code2wav.total_upsample)


@pytest.mark.parametrize("chunk", [1, 7, 16])
def test_chunks_with_left_context_join_into_the_whole_decode(tiny, chunk):
    code2wav = Code2Wav.from_folder(tiny.folder)
    codes = random_codes(code2wav)
    whole = code2wav.decode(codes, left_context=0)
    pieces = []
    for start in range(0, NUM_FRAMES, chunk):
        left = min(LEFT_CONTEXT, start)
        pieces.append(code2wav.decode(codes[:, start - left : start + chunk], left_context=left))
    joined = torch.cat(pieces)
    assert joined.shape == whole.shape  # no samples lost between chunks
    snr = snr_db(whole, joined)
    print(f"{tiny.shape}: chunks of {chunk} frames, left context {LEFT_CONTEXT}: SNR {snr:.1f} dB")
    assert snr >= 30


def test_a_chunk_keeps_the_samples_the_reference_trims_from_the_previous_one(tiny):
    code2wav = Code2Wav.from_folder(tiny.folder)
    codes, lost = random_codes(code2wav)[:, :12], code2wav.num_trailing_lost
    with torch.no_grad():
        chunk = tiny.reference.code2wav(codes[None]).flatten()  # the reference keeps chunk[4 * samples_per_frame:]
    assert 0 < lost < code2wav.samples_per_frame
    assert len(chunk) == 12 * code2wav.samples_per_frame - lost
    torch.testing.assert_close(code2wav.decode(codes, left_context=4), chunk[4 * code2wav.samples_per_frame - lost :])
    with pytest.raises(ValueError, match="left_context"):
        code2wav.decode(codes, left_context=12)
