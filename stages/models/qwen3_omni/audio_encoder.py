"""Qwen3-Omni's audio encoder: 16 kHz PCM -> log-mel features -> thinker-width rows, one per audio placeholder.

transformers' WhisperFeatureExtractor (configured as the folder's preprocessor_config.json says, or as
Qwen3-Omni's processor does) and Qwen3OmniMoeAudioEncoder are reused as they are: an utterance is encoded
once, as a whole, with no state kept between calls, and reuse keeps the rows exact to the reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from stages.models.qwen3_omni.audio_rows import AudioRows
from stages.models.qwen3_omni.config import AudioEncoderConfig, Qwen3OmniConfig
from stages.models.qwen3_omni.weights import SafetensorsFolder, load_module

PREFIX = "thinker.audio_tower."
SAMPLE_RATE = 16000
PREPROCESSOR = "preprocessor_config.json"
CALL_SETTINGS = {"sampling_rate": SAMPLE_RATE, "padding": True, "truncation": False, "return_attention_mask": True}


def build_audio_encoder(config: AudioEncoderConfig) -> nn.Module:
    """The reference module from the config's audio_config, weights not initialised (load them)."""
    from transformers.initialization import no_init_weights
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeAudioEncoderConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeAudioEncoder

    with no_init_weights():
        return Qwen3OmniMoeAudioEncoder(Qwen3OmniMoeAudioEncoderConfig(**config.raw))


def feature_extractor(path: Path, config: AudioEncoderConfig):
    """The folder's WhisperFeatureExtractor, else one with Qwen3-Omni's settings."""
    from transformers import WhisperFeatureExtractor

    if (path / PREPROCESSOR).is_file():
        return WhisperFeatureExtractor.from_pretrained(str(path))
    return WhisperFeatureExtractor(feature_size=config.num_mel_bins, sampling_rate=SAMPLE_RATE, hop_length=160,
                                   n_fft=400, return_attention_mask=True)


class Qwen3OmniAudio:
    def __init__(self, config: AudioEncoderConfig, extractor, encoder: nn.Module) -> None:
        self.config = config
        self.extractor = extractor
        self.encoder = encoder.eval()

    @classmethod
    def from_folder(cls, path: str | Path, device: str | torch.device = "cpu",
                    dtype: torch.dtype | None = None) -> Qwen3OmniAudio:
        """The audio tower of a Qwen3-Omni folder (`thinker.audio_tower.*`), loaded strictly."""
        config = Qwen3OmniConfig.from_folder(path).audio
        encoder = build_audio_encoder(config)
        load_module(encoder, SafetensorsFolder(path), PREFIX, device=device, dtype=dtype)
        return cls(config, feature_extractor(Path(path), config), encoder)

    @property
    def device(self) -> torch.device:
        return self.encoder.proj2.weight.device

    def features(self, pcm16k: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Mono float PCM at 16 kHz -> (input_features [1, mels, frames], feature_attention_mask [1, frames]),
        as Qwen3-Omni's processor makes them (padding to the longest, no truncation)."""
        out = self.extractor(np.asarray(pcm16k, dtype=np.float32), return_tensors="pt", device=str(self.device),
                             **CALL_SETTINGS)
        return out["input_features"], out["attention_mask"]

    @property
    def rows(self) -> AudioRows:
        """How many rows the encoder makes of an utterance (see AudioRows)."""
        return AudioRows(self.config.n_window, self.extractor.hop_length)

    @torch.inference_mode()
    def encode(self, pcm16k: np.ndarray) -> torch.Tensor:
        """Mono float PCM at 16 kHz -> [rows(len(pcm16k)), output_dim] rows, as the thinker's get_audio_features
        computes them."""
        features, mask = self.features(pcm16k)
        mask = mask.to(self.device)
        frames = features.to(self.device, self.encoder.proj2.weight.dtype).permute(0, 2, 1)[mask.bool()].T
        return self.encoder(frames, feature_lens=mask.sum(dim=1)).last_hidden_state
