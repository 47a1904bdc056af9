"""Qwen3-Omni's thinker as a vLLM model, loaded straight from the deployer's Qwen3-Omni folder (imported only
in a stage process that has vLLM).

vLLM's own Qwen3-Omni class (`Qwen3OmniMoeThinkerForConditionalGeneration`) wraps its audio and vision towers
around `Qwen3MoeLLMForCausalLM`, a `Qwen3MoeForCausalLM` over the folder's `thinker_config.text_config`. Here the
audio tower is a LiveServe stage of its own, whose rows come in as prompt embeddings, so vLLM runs that language
model alone: the same module vLLM's class runs, built without importing its multimodal processors (which need
torchvision, left out of vLLM's CPU venv). Its multimodal RoPE is the 1-D RoPE here: an audio or text position
has one index on all three axes, so every section rotates by it.
"""

from __future__ import annotations

from vllm.model_executor.models.qwen3_moe import Qwen3MoeForCausalLM
from vllm.model_executor.models.utils import AutoWeightsLoader, WeightsMapper

ARCHITECTURE = "LiveServeQwen3OmniThinker"
MROPE_KEYS = ("mrope_section", "mrope_interleaved", "interleaved")


class Qwen3OmniThinkerForVllm(Qwen3MoeForCausalLM):
    """vLLM's Qwen3-MoE language model over a Qwen3-Omni folder's `thinker.model.*` and `thinker.lm_head.*`
    weights; the folder's other parts (audio and vision towers, talker, code2wav) are not read."""

    folder_mapper = WeightsMapper(orig_to_new_prefix={
        "thinker.lm_head.": "lm_head.", "thinker.model.": "model.", "thinker.": None, "talker.": None,
        "code2wav.": None,
    })

    def load_weights(self, weights):
        return AutoWeightsLoader(self).load_weights(weights, mapper=self.folder_mapper)


def thinker_text_config(config):
    """vLLM's `hf_overrides`: the folder's Qwen3OmniMoeConfig becomes its thinker's text config, as this
    class's. vLLM first calls it on a placeholder config (to see whether the model type changes): that one
    passes through."""
    if not hasattr(config, "thinker_config"):
        return config
    text = config.thinker_config.text_config
    text.rope_parameters = {key: value for key, value in dict(text.rope_parameters).items() if key not in MROPE_KEYS}
    text.tie_word_embeddings = False  # the thinker has its own lm_head
    text.architectures = [ARCHITECTURE]
    return text


def register() -> None:
    """Make ARCHITECTURE a model vLLM builds, in this process (the uni-process executor's worker is it)."""
    from vllm import ModelRegistry

    ModelRegistry.register_model(ARCHITECTURE, Qwen3OmniThinkerForVllm)
