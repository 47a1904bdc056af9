"""Seeded tiny Qwen3-Omni model folders in the layout a deployer downloads: config.json, sharded safetensors
with their index, tokenizer.json and its config, the chat template, the feature extractor's config and the
generation config.

A `TinyShape` holds the sizes that vary; everything else is fixed or derived here. The token ids in
config.json are read off the folder's own tokenizer (the role words and the special tokens in its top ids);
the codec's special ids sit in the top 1024 ids of the talker's vocabulary, which is the codebook plus those
1024, because the reference suppresses that range (all but codec EOS) when it draws the first code group.
Those ids keep the released Qwen3-Omni-30B-A3B's offsets from its codebook (pad +100 ... aiden +255), and its
other fixed values are kept too: the talker normalizes its top-k routing weights, 13 position ids a second,
the talker's audio start id is the thinker's (`<|audio_start|>`).

The weights are transformers' initialization made whole: it leaves the talker's experts unset (`torch.empty`,
so not even reproducible) and its routers at zero (every expert tied), and sets every norm to one and every
bias to zero, so an implementation that skipped a norm or a bias would still match. Here the talker's experts
and routers are drawn as the thinker's are, then every parameter moves by `WEIGHT_JITTER` times a normal draw.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import Qwen3OmniMoeConfig, Qwen3OmniMoeForConditionalGeneration, WhisperFeatureExtractor
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeTalkerTextSparseMoeBlock

from lab.qwen3_omni.tiny_tokenizer import CHAT_TEMPLATE, build_tokenizer

NUM_CODEC_SPECIAL_IDS = 1024
CODEC_SPECIAL_OFFSETS = {"codec_pad_id": 100, "codec_bos_id": 101, "codec_eos_token_id": 102,
                         "codec_nothink_id": 107, "codec_think_bos_id": 108, "codec_think_eos_id": 109}
SPEAKER_OFFSETS = {"chelsie": 253, "ethan": 254, "aiden": 255}
NUM_MEL_BINS = 128
NUM_SHARDS_AT_LEAST = 2
WEIGHT_JITTER = 0.02


@dataclass(frozen=True)
class TinyShape:
    """The sizes that vary between tiny Qwen3-Omni models. The audio encoder's output size is the thinker's
    hidden size; dense MLP widths are twice the hidden size; the code predictor has the talker's width and
    heads; code2wav's attention has two heads; `accept_hidden_layer` indexes the thinker's hidden states
    (0 = the embeddings; below the layer count, so it is a layer's raw output, not the final norm's)."""

    thinker_layers: int
    thinker_hidden_size: int
    thinker_heads: int
    thinker_kv_heads: int
    thinker_head_dim: int
    thinker_num_experts: int
    thinker_num_experts_per_tok: int
    thinker_moe_intermediate_size: int
    talker_layers: int
    talker_hidden_size: int
    talker_heads: int
    talker_kv_heads: int
    talker_head_dim: int
    talker_num_experts: int
    talker_num_experts_per_tok: int
    talker_moe_intermediate_size: int
    talker_shared_expert_intermediate_size: int
    code_predictor_layers: int
    num_code_groups: int
    codebook_size: int
    code2wav_hidden_size: int
    code2wav_layers: int
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]
    decoder_dim: int
    audio_d_model: int
    audio_layers: int
    audio_heads: int
    audio_ffn_dim: int
    audio_downsample_hidden_size: int
    accept_hidden_layer: int
    text_vocab_size: int


TINY_A = TinyShape(
    thinker_layers=2, thinker_hidden_size=64, thinker_heads=4, thinker_kv_heads=2, thinker_head_dim=16,
    thinker_num_experts=4, thinker_num_experts_per_tok=2, thinker_moe_intermediate_size=32,
    talker_layers=2, talker_hidden_size=48, talker_heads=4, talker_kv_heads=2, talker_head_dim=12,
    talker_num_experts=4, talker_num_experts_per_tok=2, talker_moe_intermediate_size=24,
    talker_shared_expert_intermediate_size=48, code_predictor_layers=1, num_code_groups=4, codebook_size=64,
    code2wav_hidden_size=32, code2wav_layers=1, upsample_rates=(8, 5, 4, 3), upsampling_ratios=(2, 2),
    decoder_dim=32, audio_d_model=32, audio_layers=1, audio_heads=2, audio_ffn_dim=64,
    audio_downsample_hidden_size=8, accept_hidden_layer=1, text_vocab_size=512)  # 80 ms frames, as released
SHAPES = {
    "tiny-a": TINY_A,
    "tiny-b": TinyShape(
        thinker_layers=3, thinker_hidden_size=96, thinker_heads=4, thinker_kv_heads=2, thinker_head_dim=24,
        thinker_num_experts=8, thinker_num_experts_per_tok=3, thinker_moe_intermediate_size=48,
        talker_layers=3, talker_hidden_size=64, talker_heads=4, talker_kv_heads=1, talker_head_dim=16,
        talker_num_experts=6, talker_num_experts_per_tok=3, talker_moe_intermediate_size=32,
        talker_shared_expert_intermediate_size=64, code_predictor_layers=2, num_code_groups=6, codebook_size=128,
        code2wav_hidden_size=48, code2wav_layers=2, upsample_rates=(3, 2), upsampling_ratios=(2, 2),
        decoder_dim=64, audio_d_model=48, audio_layers=2, audio_heads=4, audio_ffn_dim=96,
        audio_downsample_hidden_size=16, accept_hidden_layer=2, text_vocab_size=640),
    "tiny-c": TinyShape(
        thinker_layers=4, thinker_hidden_size=128, thinker_heads=8, thinker_kv_heads=4, thinker_head_dim=16,
        thinker_num_experts=16, thinker_num_experts_per_tok=4, thinker_moe_intermediate_size=32,
        talker_layers=2, talker_hidden_size=96, talker_heads=6, talker_kv_heads=2, talker_head_dim=16,
        talker_num_experts=8, talker_num_experts_per_tok=1, talker_moe_intermediate_size=32,
        talker_shared_expert_intermediate_size=96, code_predictor_layers=1, num_code_groups=8, codebook_size=256,
        code2wav_hidden_size=64, code2wav_layers=1, upsample_rates=(4, 2), upsampling_ratios=(2,), decoder_dim=64,
        audio_d_model=64, audio_layers=2, audio_heads=4, audio_ffn_dim=128, audio_downsample_hidden_size=16,
        accept_hidden_layer=3, text_vocab_size=768),
    "tiny-d": replace(TINY_A, thinker_layers=3, thinker_heads=2, thinker_kv_heads=1, thinker_head_dim=32,
                      accept_hidden_layer=2),  # a thinker vLLM's CPU attention runs (head sizes from 32 up)
}


def write_tiny_folder(path: Path, shape: TinyShape, seed: int) -> Path:
    """Write the folder of a float32 Qwen3-Omni with `shape`'s sizes and weights drawn after
    `torch.manual_seed(seed)`, and return `path`. The same shape and seed always write the same bytes; the
    weights are saved in the original checkpoint's layout (one key per expert) over at least two shards."""
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(shape.text_vocab_size)
    config = Qwen3OmniMoeConfig(**_config_fields(shape, _token_ids(tokenizer)))
    torch.manual_seed(seed)
    model = Qwen3OmniMoeForConditionalGeneration(config).eval()
    _draw_every_weight(model)
    num_bytes = sum(parameter.numel() * parameter.element_size() for parameter in model.state_dict().values())
    model.save_pretrained(path, max_shard_size=num_bytes // (NUM_SHARDS_AT_LEAST + 1))
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(_tokenizer_config(), indent=2) + "\n")
    (path / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    WhisperFeatureExtractor(feature_size=NUM_MEL_BINS, sampling_rate=16000, hop_length=160, chunk_length=30,
                            n_fft=400, padding_value=0.0, return_attention_mask=True).save_pretrained(path)
    return path


@torch.no_grad()
def _draw_every_weight(model: Qwen3OmniMoeForConditionalGeneration) -> None:
    std = model.config.initializer_range
    for module in model.modules():
        if isinstance(module, Qwen3OmniMoeTalkerTextSparseMoeBlock):
            for weight in (module.experts.gate_up_proj, module.experts.down_proj, module.gate.weight):
                weight.normal_(0.0, std)
    for parameter in model.parameters():
        parameter.add_(torch.randn_like(parameter), alpha=WEIGHT_JITTER)


def _token_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """config.json's text token ids, as the tokenizer spells them."""
    special = {"im_start": "<|im_start|>", "im_end": "<|im_end|>", "audio": "<|audio_pad|>",
               "audio_start": "<|audio_start|>", "audio_end": "<|audio_end|>", "image": "<|image_pad|>",
               "video": "<|video_pad|>", "vision_start": "<|vision_start|>", "vision_end": "<|vision_end|>",
               "tts_pad": "<tts_pad>", "tts_bos": "<tts_text_bos>", "tts_eos": "<tts_text_eod>"}
    ids = {name: tokenizer.token_to_id(token) for name, token in special.items()}
    return ids | {role: tokenizer.encode(role).ids[0] for role in ("system", "user", "assistant")}


def _config_fields(shape: TinyShape, ids: dict[str, int]) -> dict:
    media = {"audio_token_id": ids["audio"], "image_token_id": ids["image"], "video_token_id": ids["video"],
             "audio_start_token_id": ids["audio_start"], "audio_end_token_id": ids["audio_end"],
             "vision_start_token_id": ids["vision_start"], "position_id_per_seconds": 13}
    thinker_only = {"user_token_id": ids["user"], "vision_end_token_id": ids["vision_end"]}
    return {"thinker_config": _thinker(shape) | media | thinker_only,
            "talker_config": _talker(shape) | media, "code2wav_config": _code2wav(shape),
            "im_start_token_id": ids["im_start"], "im_end_token_id": ids["im_end"],
            "tts_pad_token_id": ids["tts_pad"], "tts_bos_token_id": ids["tts_bos"],
            "tts_eos_token_id": ids["tts_eos"], "system_token_id": ids["system"],
            "user_token_id": ids["user"], "assistant_token_id": ids["assistant"]}


def _thinker(shape: TinyShape) -> dict:
    audio = {"num_mel_bins": NUM_MEL_BINS, "encoder_layers": shape.audio_layers,
             "encoder_attention_heads": shape.audio_heads, "encoder_ffn_dim": shape.audio_ffn_dim,
             "d_model": shape.audio_d_model, "output_dim": shape.thinker_hidden_size,
             "downsample_hidden_size": shape.audio_downsample_hidden_size}
    vision = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
              "out_hidden_size": shape.thinker_hidden_size, "num_position_embeddings": 16,
              "deepstack_visual_indexes": [0]}
    text = {"vocab_size": shape.text_vocab_size, "hidden_size": shape.thinker_hidden_size,
            "intermediate_size": 2 * shape.thinker_hidden_size, "num_hidden_layers": shape.thinker_layers,
            "num_attention_heads": shape.thinker_heads, "num_key_value_heads": shape.thinker_kv_heads,
            "head_dim": shape.thinker_head_dim, "num_experts": shape.thinker_num_experts,
            "num_experts_per_tok": shape.thinker_num_experts_per_tok,
            "moe_intermediate_size": shape.thinker_moe_intermediate_size,
            "rope_parameters": _mrope(shape.thinker_head_dim)}
    return {"audio_config": audio, "vision_config": vision, "text_config": text}


def _talker(shape: TinyShape) -> dict:
    attention = {"hidden_size": shape.talker_hidden_size, "intermediate_size": 2 * shape.talker_hidden_size,
                 "num_attention_heads": shape.talker_heads, "num_key_value_heads": shape.talker_kv_heads,
                 "head_dim": shape.talker_head_dim}
    text = attention | {"vocab_size": shape.codebook_size + NUM_CODEC_SPECIAL_IDS,
                        "num_hidden_layers": shape.talker_layers, "num_experts": shape.talker_num_experts,
                        "num_experts_per_tok": shape.talker_num_experts_per_tok,
                        "moe_intermediate_size": shape.talker_moe_intermediate_size,
                        "shared_expert_intermediate_size": shape.talker_shared_expert_intermediate_size,
                        "norm_topk_prob": True, "rope_parameters": _mrope(shape.talker_head_dim)}
    code_predictor = attention | {"vocab_size": shape.codebook_size, "num_code_groups": shape.num_code_groups,
                                  "num_hidden_layers": shape.code_predictor_layers}
    codec_ids = {name: shape.codebook_size + offset for name, offset in CODEC_SPECIAL_OFFSETS.items()}
    speakers = {name: shape.codebook_size + offset for name, offset in SPEAKER_OFFSETS.items()}
    return codec_ids | {"text_config": text, "code_predictor_config": code_predictor,
                        "num_code_groups": shape.num_code_groups, "thinker_hidden_size": shape.thinker_hidden_size,
                        "accept_hidden_layer": shape.accept_hidden_layer, "speaker_id": speakers,
                        "spatial_merge_size": 2}


def _code2wav(shape: TinyShape) -> dict:
    return {"codebook_size": shape.codebook_size, "num_quantizers": shape.num_code_groups,
            "hidden_size": shape.code2wav_hidden_size, "intermediate_size": 2 * shape.code2wav_hidden_size,
            "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": shape.code2wav_layers,
            "upsample_rates": list(shape.upsample_rates), "upsampling_ratios": list(shape.upsampling_ratios),
            "decoder_dim": shape.decoder_dim}


def _mrope(head_dim: int) -> dict:
    """Qwen3-Omni's interleaved multimodal RoPE, its sections in the real model's proportions ([24, 20, 20]
    of 64 frequencies)."""
    spatial = head_dim // 2 * 5 // 16
    return {"rope_type": "default", "rope_theta": 1000000.0, "interleaved": True, "mrope_interleaved": True,
            "mrope_section": [head_dim // 2 - 2 * spatial, spatial, spatial]}


def _tokenizer_config() -> dict:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None, "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>", "unk_token": None, "model_max_length": 32768,
            "clean_up_tokenization_spaces": False, "split_special_tokens": False}
