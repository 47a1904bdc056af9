"""Qwen3-Omni's vocoder: codec frames [G, T] -> 24 kHz waveform, decoded in chunks with left context.

transformers' Qwen3OmniMoeCode2Wav is reused on purpose: it is stateless per chunk (every call decodes the
frames it is given, left context included, from scratch), so it needs no paged state of ours, and reusing it
keeps the waveform exact to the reference.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from stages.models.qwen3_omni.config import Code2WavConfig, Qwen3OmniConfig
from stages.models.qwen3_omni.weights import SafetensorsFolder, load_module

PREFIX = "code2wav."
SAMPLE_RATE = 24000  # code2wav's waveform
LEFT_CONTEXT_FRAMES = 25  # frames decoded again before each streamed chunk (the reference's chunked_decode's)


def build_code2wav(config: Code2WavConfig) -> nn.Module:
    """The reference module from the config's code2wav_config, weights not initialised (load them)."""
    from transformers.initialization import no_init_weights
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeCode2WavConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeCode2Wav

    with no_init_weights():
        return Qwen3OmniMoeCode2Wav(Qwen3OmniMoeCode2WavConfig(**config.raw))


class Code2Wav:
    """`decode` one chunk of frames at a time; consecutive chunks, each with left context, concatenate to what
    one decode of all the frames gives (up to the left context's reach).

    The reference's chunked_decode keeps a chunk's samples from `left_context * samples_per_frame` on. But a
    decode of n frames yields `num_trailing_lost` samples fewer than n * samples_per_frame (the causal transposed
    convolutions trim the samples that later frames would still add to), so its chunks, concatenated, drift
    that many samples per chunk from one decode of all the frames. `decode` keeps those samples instead: a chunk
    with left context starts `num_trailing_lost` samples earlier, where the previous chunk stopped.
    """

    def __init__(self, config: Code2WavConfig, module: nn.Module) -> None:
        self.config = config
        self.module = module.eval()
        self.samples_per_frame = config.total_upsample
        self.num_trailing_lost = self.samples_per_frame - self._decode_frames(self._silent_frame()).numel()

    @classmethod
    def from_folder(cls, path: str | Path, device: str | torch.device = "cpu",
                    dtype: torch.dtype | None = None) -> Code2Wav:
        """code2wav of a Qwen3-Omni folder (`code2wav.*`), loaded strictly."""
        config = Qwen3OmniConfig.from_folder(path).code2wav
        module = build_code2wav(config)
        load_module(module, SafetensorsFolder(path), PREFIX, device=device, dtype=dtype)
        return cls(config, module)

    @property
    def device(self) -> torch.device:
        return self.module.code_embedding.weight.device

    def decode(self, codes: torch.Tensor, left_context: int) -> torch.Tensor:
        """codes [G, T] (T > left_context; the first `left_context` frames were decoded before) -> the float
        waveform of the last T - left_context frames, 1-D. With left_context 0 it is the reference's decode of
        the frames (T * samples_per_frame - num_trailing_lost samples); with more, (T - left_context) *
        samples_per_frame samples that begin where the previous chunk's ended (see the class docstring)."""
        if not 0 <= left_context < codes.shape[1]:
            raise ValueError(f"left_context must be in [0, {codes.shape[1]}) frames, got {left_context}")
        start = left_context * self.samples_per_frame - self.num_trailing_lost if left_context else 0
        if start < 0:
            raise ValueError(f"a left context of {left_context} frames does not reach the "
                             f"{self.num_trailing_lost} samples the previous chunk left out")
        return self._decode_frames(codes)[start:]

    @torch.inference_mode()
    def _decode_frames(self, codes: torch.Tensor) -> torch.Tensor:
        return self.module(codes[None].to(self.device)).flatten().float()

    def _silent_frame(self) -> torch.Tensor:
        return torch.zeros(self.config.num_quantizers, 1, dtype=torch.long)
