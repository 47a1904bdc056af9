"""The audio encoder reused from transformers, fed as Qwen3-Omni's processor feeds it."""

import json

import numpy as np
import torch
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import _get_feat_extract_output_lengths

from stages.models.qwen3_omni.audio_encoder import Qwen3OmniAudio
from stages.models.qwen3_omni.audio_rows import AudioRows


def chirp(seconds: float = 1.5, rate: int = 16000) -> np.ndarray:
    """A rising tone with a little noise: a synthetic signal with structure in every mel band."""
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(0).standard_normal(len(t))
    return (0.4 * np.sin(2 * np.pi * (200 + 1500 * t) * t) + 0.02 * noise).astype(np.float32)


def test_encode_equals_the_thinkers_get_audio_features(tiny):
    audio = Qwen3OmniAudio.from_folder(tiny.folder)
    pcm = chirp()
    features, mask = audio.features(pcm)
    assert features.shape == (1, 128, 150) and mask.shape == (1, 150) and bool(mask.all())  # 10 ms hop, unpadded
    with torch.no_grad():
        expected = tiny.reference.thinker.get_audio_features(features, feature_attention_mask=mask).last_hidden_state
    rows = audio.encode(pcm)
    assert rows.shape == (audio.rows.of_frames(150), tiny.reference.config.thinker_config.text_config.hidden_size)
    torch.testing.assert_close(rows, expected, atol=1e-5, rtol=0)


def test_num_tokens_is_the_references_output_length(tiny):
    audio = Qwen3OmniAudio.from_folder(tiny.folder)
    for frames in (1, 7, 99, 100, 101, 150, 200, 437, 3000):
        assert audio.rows.of_frames(frames) == int(_get_feat_extract_output_lengths(torch.tensor(frames), 50)), frames


def folder_with_hop(tiny, path, hop_length):
    """The tiny folder (linked) with a preprocessor_config.json of another hop."""
    for item in tiny.folder.iterdir():
        (path / item.name).symlink_to(item)
    settings = {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128, "hop_length": hop_length,
                "n_fft": 400, "sampling_rate": 16000, "return_attention_mask": True, "chunk_length": 30}
    (path / "preprocessor_config.json").write_text(json.dumps(settings))
    return path


def test_a_folders_preprocessor_config_sets_the_features(tiny, tmp_path):
    features, mask = Qwen3OmniAudio.from_folder(folder_with_hop(tiny, tmp_path, 320)).features(chirp())
    assert features.shape == (1, 128, 75) and mask.shape == (1, 75)  # a 20 ms hop: half the frames


def test_the_rows_of_a_longer_hop_are_what_the_encoder_makes(tiny, tmp_path):
    audio, pcm = Qwen3OmniAudio.from_folder(folder_with_hop(tiny, tmp_path, 320)), chirp()
    assert len(audio.encode(pcm)) == audio.rows(len(pcm)) == AudioRows(50, 320)(len(pcm))
