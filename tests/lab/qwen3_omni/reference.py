"""The oracle LiveServe's native Qwen3-Omni is held to: transformers' `Qwen3OmniMoeForConditionalGeneration`
loaded from a model folder, prompted the way `Qwen3OmniMoeProcessor` prompts it, replying greedily in text
and speech.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from transformers import AutoTokenizer, Qwen3OmniMoeForConditionalGeneration, WhisperFeatureExtractor
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import _get_feat_extract_output_lengths

SAMPLING_RATE = 16000
REFERENCE_DEFAULT_SPEAKER = "Ethan"  # `generate`'s default


class ReferencePrompt(NamedTuple):
    """A prompt as `generate` takes it: ids [1, T]; for a spoken prompt, log-mel features [1, mels, frames] and
    their mask [1, frames] (else None)."""

    input_ids: torch.Tensor
    input_features: torch.Tensor | None
    feature_attention_mask: torch.Tensor | None


class ReferenceReply(NamedTuple):
    """What the reference said: the generated text ids after the prompt (its EOS included when it stopped on
    one), the codec codes it decoded [num_code_groups, frames], and the waveform (1-D float)."""

    text_token_ids: list[int]
    codes: torch.Tensor
    wav: torch.Tensor


@dataclass
class ReferenceOmni:
    """A model folder's model (float32, eval), tokenizer (with the folder's chat template) and feature extractor."""

    model: Qwen3OmniMoeForConditionalGeneration
    tokenizer: Any
    feature_extractor: WhisperFeatureExtractor

    @classmethod
    def load(cls, folder: Path) -> ReferenceOmni:
        model = Qwen3OmniMoeForConditionalGeneration.from_pretrained(folder, dtype=torch.float32).eval()
        return cls(model, AutoTokenizer.from_pretrained(folder), WhisperFeatureExtractor.from_pretrained(folder))

    def prompt_ids(self, messages: list[dict], audio: np.ndarray | None = None) -> ReferencePrompt:
        """The chat template over `messages` with the generation prompt, tokenized. `audio` (16 kHz mono) is
        what the one audio part of `messages` holds: its `<|audio_pad|>` becomes one pad per audio-encoder
        output frame, and the features come from the feature extractor with the processor's audio settings."""
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = self.tokenizer(text)["input_ids"]
        pad = self.model.config.thinker_config.audio_token_id
        if ids.count(pad) != (audio is not None):
            raise ValueError(f"{ids.count(pad)} audio parts in the messages, {int(audio is not None)} audio given")
        if audio is None:
            return ReferencePrompt(torch.tensor([ids]), None, None)
        features = self.feature_extractor(audio, sampling_rate=SAMPLING_RATE, padding=True, truncation=False,
                                          return_attention_mask=True, return_tensors="pt")
        n_window = self.model.config.thinker_config.audio_config.n_window
        num_pads = int(_get_feat_extract_output_lengths(features["attention_mask"].sum(-1), n_window)[0])
        at = ids.index(pad)
        ids = ids[:at] + [pad] * num_pads + ids[at + 1:]
        return ReferencePrompt(torch.tensor([ids]), features["input_features"], features["attention_mask"])

    def reply(self, input_ids: torch.Tensor, input_features: torch.Tensor | None = None,
              feature_attention_mask: torch.Tensor | None = None, thinker_max_new_tokens: int = 16,
              talker_max_new_tokens: int = 64, speaker: str | None = None) -> ReferenceReply:
        """`generate` with audio, both models greedy, the thinker stopping at config.json's `im_end_token_id`.
        `speaker` defaults to `default_speaker()`."""
        audio = {} if input_features is None else {"input_features": input_features,
                                                   "feature_attention_mask": feature_attention_mask}
        with _recorded_codes(self.model.code2wav) as decoded, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Passing `repetition_penalty`")  # the talker's, as designed
            sequences, wav = self.model.generate(
                input_ids=input_ids, return_audio=True, thinker_do_sample=False, talker_do_sample=False,
                thinker_max_new_tokens=thinker_max_new_tokens, talker_max_new_tokens=talker_max_new_tokens,
                thinker_eos_token_id=self.model.config.im_end_token_id, speaker=speaker or self.default_speaker(),
                **audio)
        return ReferenceReply(sequences[0, input_ids.shape[1]:].tolist(), decoded[0][0], wav.reshape(-1))

    def default_speaker(self) -> str:
        """The reference's own default ("Ethan") if config.json's talker_config.speaker_id names it, else the
        first speaker there."""
        speakers = self.model.config.talker_config.speaker_id
        return REFERENCE_DEFAULT_SPEAKER if REFERENCE_DEFAULT_SPEAKER.lower() in speakers else next(iter(speakers))


@contextmanager
def _recorded_codes(code2wav: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """The codes `code2wav.chunked_decode` is called with inside the block (`generate` does not return them)."""
    decoded: list[torch.Tensor] = []
    decode = code2wav.chunked_decode

    def recording_decode(codes: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        decoded.append(codes)
        return decode(codes, *args, **kwargs)

    code2wav.chunked_decode = recording_decode
    try:
        yield decoded
    finally:
        del code2wav.chunked_decode
