"""Tiny random Qwen3-Omni models of transformers' reference implementation, saved as model folders in the
original checkpoint layout: the oracle the native stages are compared with.

Two shapes that differ in layers, experts and top-k, hidden sizes, dense layers, code groups and code2wav's
window: "small" (all thinker layers sparse, top-k renormalised) and "wide" (a dense thinker layer, top-k not
renormalised, more code groups, a code2wav window wider than the left context of chunked decoding).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch

TOKENS = dict(im_start_token_id=210, im_end_token_id=211, tts_pad_token_id=212, tts_bos_token_id=213,
              tts_eos_token_id=214, system_token_id=215, user_token_id=204, assistant_token_id=216)
THINKER_IDS = dict(audio_token_id=200, image_token_id=201, video_token_id=202, audio_start_token_id=203,
                   user_token_id=204, vision_start_token_id=205)
CODEC_IDS = dict(codec_eos_token_id=1064, codec_nothink_id=1065, codec_think_bos_id=1066, codec_think_eos_id=1067,
                 codec_pad_id=1068, codec_bos_id=1069, speaker_id={"ethan": 1070})


def _rope(sections: list[int]) -> dict:
    return {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": sections, "mrope_interleaved": True}


SHAPES = {
    "small": dict(
        thinker=dict(vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4,
                     num_experts_per_tok=2, rope_parameters=_rope([2, 3, 3])),
        talker=dict(hidden_size=48, intermediate_size=96, moe_intermediate_size=24, shared_expert_intermediate_size=48,
                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=12, num_experts=4,
                    num_experts_per_tok=2, rope_parameters=_rope([2, 2, 2])),
        predictor=dict(hidden_size=48, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=12),
        num_code_groups=4, accept_hidden_layer=1, audio_d_model=32,
        code2wav=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                      intermediate_size=64, upsample_rates=[2, 2], upsampling_ratios=[2, 2], decoder_dim=32,
                      sliding_window=8),
    ),
    "wide": dict(
        thinker=dict(vocab_size=300, hidden_size=96, intermediate_size=160, moe_intermediate_size=40,
                     num_hidden_layers=3, num_attention_heads=6, num_key_value_heads=2, head_dim=16, num_experts=8,
                     num_experts_per_tok=3, norm_topk_prob=False, mlp_only_layers=[1],
                     rope_parameters=_rope([2, 3, 3])),
        talker=dict(hidden_size=64, intermediate_size=80, moe_intermediate_size=32, shared_expert_intermediate_size=56,
                    num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1, head_dim=16, num_experts=6,
                    num_experts_per_tok=3, rope_parameters=_rope([2, 3, 3])),
        predictor=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16),
        num_code_groups=6, accept_hidden_layer=2, audio_d_model=48,
        code2wav=dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, upsample_rates=[3, 2], upsampling_ratios=[2], decoder_dim=32,
                      sliding_window=64),
    ),
}


def config_dict(shape: str) -> dict:
    """The constructor arguments of transformers' Qwen3OmniMoeConfig for a tiny model of `shape`."""
    spec = copy.deepcopy(SHAPES[shape])
    thinker_text = dict(spec["thinker"], max_position_embeddings=1024)
    hidden, groups = thinker_text["hidden_size"], spec["num_code_groups"]
    audio = dict(num_mel_bins=128, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=64,
                 d_model=spec["audio_d_model"], output_dim=hidden, n_window=50, n_window_infer=800,
                 downsample_hidden_size=16)
    vision = dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=hidden,
                  deepstack_visual_indexes=[0])
    talker_text = dict(spec["talker"], vocab_size=1088, max_position_embeddings=1024)
    predictor = dict(spec["predictor"], vocab_size=64, num_code_groups=groups)
    talker = dict(text_config=talker_text, code_predictor_config=predictor, num_code_groups=groups,
                  thinker_hidden_size=hidden, accept_hidden_layer=spec["accept_hidden_layer"], spatial_merge_size=2,
                  **CODEC_IDS, **{k: v for k, v in THINKER_IDS.items() if k != "user_token_id"})
    code2wav = dict(spec["code2wav"], codebook_size=64, num_quantizers=groups)
    thinker = dict(text_config=thinker_text, audio_config=audio, vision_config=vision, **THINKER_IDS)
    return dict(thinker_config=thinker, talker_config=talker, code2wav_config=code2wav, **TOKENS)


@dataclass
class TinyOmni:
    shape: str
    folder: Path
    reference: torch.nn.Module  # Qwen3OmniMoeForConditionalGeneration, eval mode, the weights in `folder`


def build_tiny_omni(shape: str, folder: Path, seed: int = 0) -> TinyOmni:
    """A seeded random reference model of `shape`, saved to `folder` (config.json and model.safetensors)."""
    from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration

    torch.manual_seed(seed)
    model = Qwen3OmniMoeForConditionalGeneration(Qwen3OmniMoeConfig(**config_dict(shape))).eval()
    randomize(model, seed)
    model.save_pretrained(folder)
    return TinyOmni(shape, Path(folder), model)


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Every parameter random, from `seed`. transformers' init leaves the talker's MoE blocks uninitialised (its
    _init_weights covers the thinker's sparse block only: the experts keep torch.empty's memory, the routers
    zeros, which ties every routing decision), and sets norms to one and biases to zero, where swapping q_norm
    and k_norm would go unseen. Routers get a wide spread so that tokens really pick different experts."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            noise = torch.randn(param.shape, generator=gen)
            if name.endswith("mlp.gate.weight"):
                param.copy_(0.3 * noise)
            elif ".mlp.experts." in name:
                param.copy_(0.02 * noise)
            elif bool((param == param.flatten()[0]).all()):
                param.add_(0.1 * noise)
