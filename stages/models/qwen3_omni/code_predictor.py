"""The talker's code predictor: codes 1..G-1 of a frame from the talker's last hidden state and code 0.

transformers' Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration is reused on purpose, its forward
driven here step by step with a DynamicCache: each frame runs a fresh G-token sequence whose cache lives for
that frame only, and every row of a batch has the same length (no padding), so paged KV would buy nothing and
the reference module is exact by construction. Written natively it would save transformers' per-step overhead
(mask building, output objects) of G-1 small calls per frame.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from stages.models.qwen3_omni.config import CodePredictorConfig

Sampler = Callable[[torch.Tensor], torch.Tensor]  # logits [B, V] -> ids [B]


def build_code_predictor(config: CodePredictorConfig) -> nn.Module:
    """The reference module from the config's code_predictor_config, weights not initialised (load them)."""
    from transformers.initialization import no_init_weights
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as reference
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import (
        Qwen3OmniMoeTalkerCodePredictorConfig,
    )

    with no_init_weights():
        return reference.Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration(
            Qwen3OmniMoeTalkerCodePredictorConfig(**config.raw))


def greedy(logits: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)


@torch.inference_mode()
def predict_residuals(module: nn.Module, past_hidden: torch.Tensor, code0_embeds: torch.Tensor,
                      num_code_groups: int, sample: Sampler | None = None) -> torch.Tensor:
    """The reference's code_predictor.generate for a batch: prefill [past_hidden, embedding of code 0]
    (`code0_embeds`, the talker's codec embedding), then step i = 1..G-1 picks code i from lm_head[i-1]'s
    logits and feeds codec_embedding[i-1](code i) to the next step. `sample` picks ids from logits (default
    greedy). past_hidden, code0_embeds [B, H] -> LongTensor [B, G-1]."""
    from transformers import DynamicCache

    pick = sample or greedy
    cache = DynamicCache(config=module.config)
    out = module(inputs_embeds=torch.stack([past_hidden, code0_embeds], dim=1), past_key_values=cache,
                 use_cache=True)
    codes = [pick(out.logits[:, -1])]
    for step in range(1, num_code_groups - 1):
        out = module(input_ids=codes[-1][:, None], past_key_values=cache, use_cache=True, generation_steps=step)
        codes.append(pick(out.logits[:, -1]))
    return torch.stack(codes, dim=1)
