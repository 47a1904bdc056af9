"""Qwen3-Omni's config.json as frozen dataclasses: the two MoE decoders (thinker, talker), the code predictor,
code2wav, the audio encoder and the special ids.

Fields that fix a shape are required; knobs the reference gives a default to (norm eps, rope theta, top-k
renormalisation, sparse step, token ids...) take that default. The sub-dicts that transformers' modules are
built from (code predictor, code2wav, audio encoder) are kept as they are in `raw`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from stages.models.qwen3_omni.json_fields import JsonSection


@dataclass(frozen=True)
class MoeDecoderConfig:
    """A Qwen3-MoE decoder (q/k-normed attention, RoPE, sparse MoE and dense SwiGLU layers). Its names are
    what DecoderRunner and KVPoolConfig read (num_layers, num_heads, num_kv_heads, head_dim)."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    moe_intermediate_size: int
    num_experts: int
    num_experts_per_tok: int
    norm_topk_prob: bool
    decoder_sparse_step: int
    mlp_only_layers: tuple[int, ...]
    shared_expert_intermediate_size: int | None  # the talker's; None for the thinker
    rope_theta: float
    rms_norm_eps: float
    max_position: int
    tie_word_embeddings: bool = False

    def is_sparse(self, layer: int) -> bool:
        """Whether `layer` is an MoE block. The talker's layers all are (shared expert and all): the reference
        builds its sparse block in every layer, whatever mlp_only_layers and decoder_sparse_step say."""
        if self.shared_expert_intermediate_size is not None:
            return True
        return (layer not in self.mlp_only_layers and self.num_experts > 0
                and (layer + 1) % self.decoder_sparse_step == 0)


@dataclass(frozen=True)
class CodePredictorConfig:
    """The talker's code predictor: a dense decoder predicting codes 1..G-1 of each frame."""

    raw: dict
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    num_code_groups: int


@dataclass(frozen=True)
class TalkerConfig:
    """The talker: its MoE decoder (`decoder`, what DecoderRunner reads), code predictor and special codec ids."""

    decoder: MoeDecoderConfig
    code_predictor: CodePredictorConfig
    thinker_hidden_size: int
    num_code_groups: int
    accept_hidden_layer: int
    codec_eos_token_id: int
    codec_nothink_id: int
    codec_think_bos_id: int
    codec_think_eos_id: int
    codec_pad_id: int
    codec_bos_id: int
    speaker_id: dict[str, int]


@dataclass(frozen=True)
class Code2WavConfig:
    raw: dict
    codebook_size: int
    num_quantizers: int
    upsample_rates: tuple[int, ...]
    upsampling_ratios: tuple[int, ...]

    @property
    def total_upsample(self) -> int:
        """Waveform samples per codec frame."""
        return math.prod(self.upsample_rates + self.upsampling_ratios)


@dataclass(frozen=True)
class AudioEncoderConfig:
    """The audio tower's config.json section (`raw`), and the feature extractor's hop (samples a feature frame,
    from the folder's preprocessor_config.json where it has one)."""

    raw: dict
    n_window: int
    num_mel_bins: int
    output_dim: int
    hop_length: int = 160


@dataclass(frozen=True)
class SpecialTokens:
    """Thinker-vocabulary ids of the chat layout, the talker's text markers and the audio placeholders."""

    im_start_token_id: int
    im_end_token_id: int
    system_token_id: int
    user_token_id: int
    assistant_token_id: int
    tts_pad_token_id: int
    tts_bos_token_id: int
    tts_eos_token_id: int
    audio_token_id: int
    audio_start_token_id: int


@dataclass(frozen=True)
class Qwen3OmniConfig:
    thinker: MoeDecoderConfig
    talker: TalkerConfig
    code2wav: Code2WavConfig
    audio: AudioEncoderConfig
    tokens: SpecialTokens

    @property
    def max_position(self) -> int:
        """The longest context the thinker takes (what a session's context is held to)."""
        return self.thinker.max_position

    @classmethod
    def from_folder(cls, path: str | Path) -> Qwen3OmniConfig:
        file = Path(path) / "config.json"
        if not file.is_file():
            raise FileNotFoundError(f"{path} has no config.json (not a Qwen3-Omni model folder)")
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{file}: not JSON ({exc})") from None
        return cls.from_json(data, str(file))

    @classmethod
    def from_json(cls, data: dict, where: str = "config.json") -> Qwen3OmniConfig:
        """ValueError naming the field (by its dotted path) that is missing, of the wrong type or inconsistent."""
        top = JsonSection(data, "", where)
        thinker_section, talker_section = top.section("thinker_config"), top.section("talker_config")
        thinker = _moe_decoder(thinker_section.section("text_config"), thinker_section, 1e6, True, shared=False)
        talker = _talker(talker_section, thinker)
        config = cls(thinker, talker, _code2wav(top.section("code2wav_config")),
                     _audio_encoder(thinker_section.section("audio_config")), _special_tokens(top, thinker_section))
        _check_consistency(config, top)
        return config


def _moe_decoder(text: JsonSection, parent: JsonSection, default_theta: float, default_norm_topk: bool,
                 shared: bool) -> MoeDecoderConfig:
    _require_value(text, "hidden_act", "silu")
    _require_value(text, "attention_bias", False)
    num_heads = text.integer("num_attention_heads")
    config = MoeDecoderConfig(
        vocab_size=text.integer("vocab_size"), hidden_size=text.integer("hidden_size"),
        num_layers=text.integer("num_hidden_layers"), num_heads=num_heads,
        num_kv_heads=text.integer("num_key_value_heads"),
        head_dim=text.integer("head_dim", text.integer("hidden_size") // num_heads),
        intermediate_size=text.integer("intermediate_size"),
        moe_intermediate_size=text.integer("moe_intermediate_size"),
        num_experts=text.integer(text.first_present("num_experts", "num_local_experts"), minimum=0),
        num_experts_per_tok=text.integer("num_experts_per_tok"),
        norm_topk_prob=text.flag("norm_topk_prob", default_norm_topk),
        decoder_sparse_step=text.integer("decoder_sparse_step", 1),
        mlp_only_layers=text.integers("mlp_only_layers", ()),
        shared_expert_intermediate_size=text.integer("shared_expert_intermediate_size") if shared else None,
        rope_theta=_rope_theta(text, default_theta), rms_norm_eps=text.number("rms_norm_eps", 1e-6),
        max_position=text.integer("max_position_embeddings", 32768),
        tie_word_embeddings=parent.flag("tie_word_embeddings", False),
    )
    if config.num_heads % config.num_kv_heads:
        raise text.error("num_attention_heads", f"({config.num_heads}) must be a multiple of num_key_value_heads "
                                                f"({config.num_kv_heads})")
    if config.head_dim % 2:
        raise text.error("head_dim", f"must be even for rotary embeddings, got {config.head_dim}")
    if config.num_experts and config.num_experts_per_tok > config.num_experts:
        raise text.error("num_experts_per_tok", f"({config.num_experts_per_tok}) exceeds num_experts "
                                                f"({config.num_experts})")
    return config


def _rope_theta(text: JsonSection, default: float) -> float:
    """From rope_parameters (transformers 5) or rope_scaling + rope_theta (the original folders); only the
    default rope type (positions here are plain, so multimodal RoPE is ordinary RoPE)."""
    name = text.first_present("rope_parameters", "rope_scaling")
    rope = text.optional_section(name)
    rope_type = rope.text(rope.first_present("rope_type", "type"), "default")
    if rope_type != "default":
        raise rope.error("rope_type", f"must be 'default' (the only rope type supported), got {rope_type!r}")
    return rope.number("rope_theta", text.number("rope_theta", default))


def _talker(section: JsonSection, thinker: MoeDecoderConfig) -> TalkerConfig:
    decoder = _moe_decoder(section.section("text_config"), section, 1e4, False, shared=True)
    codec = {name: section.integer(name, default, minimum=0) for name, default in _CODEC_DEFAULTS.items()}
    speakers = section.ids_by_name("speaker_id")
    for name, value in {**codec, **{f"speaker_id.{k}": v for k, v in speakers.items()}}.items():
        if value >= decoder.vocab_size:
            raise section.error(name, f"({value}) is not below {section.dotted('text_config.vocab_size')} "
                                      f"({decoder.vocab_size})")
    config = TalkerConfig(
        decoder=decoder, code_predictor=_code_predictor(section.section("code_predictor_config")),
        thinker_hidden_size=section.integer("thinker_hidden_size"),
        num_code_groups=section.integer("num_code_groups", 32, minimum=2),
        accept_hidden_layer=section.integer("accept_hidden_layer", 18, minimum=0), speaker_id=speakers, **codec)
    _require_equal(section, "thinker_hidden_size", config.thinker_hidden_size,
                   "thinker_config.text_config.hidden_size", thinker.hidden_size)
    _require_equal(section, "code_predictor_config.hidden_size", config.code_predictor.hidden_size,
                   section.dotted("text_config.hidden_size"), decoder.hidden_size)
    _require_equal(section, "num_code_groups", config.num_code_groups,
                   section.dotted("code_predictor_config.num_code_groups"), config.code_predictor.num_code_groups)
    if config.accept_hidden_layer > thinker.num_layers:
        raise section.error("accept_hidden_layer", f"({config.accept_hidden_layer}) exceeds the thinker's "
                                                   f"num_hidden_layers ({thinker.num_layers})")
    return config


_CODEC_DEFAULTS = {"codec_eos_token_id": 4198, "codec_nothink_id": 4203, "codec_think_bos_id": 4204,
                   "codec_think_eos_id": 4205, "codec_pad_id": 4196, "codec_bos_id": 4197}


def _code_predictor(section: JsonSection) -> CodePredictorConfig:
    return CodePredictorConfig(
        raw=dict(section.data), vocab_size=section.integer("vocab_size"), hidden_size=section.integer("hidden_size"),
        num_layers=section.integer("num_hidden_layers"), num_heads=section.integer("num_attention_heads"),
        num_kv_heads=section.integer("num_key_value_heads"), head_dim=section.integer("head_dim", 128),
        intermediate_size=section.integer("intermediate_size"),
        num_code_groups=section.integer("num_code_groups", minimum=2))


def _code2wav(section: JsonSection) -> Code2WavConfig:
    return Code2WavConfig(
        raw=dict(section.data), codebook_size=section.integer("codebook_size", 2048),
        num_quantizers=section.integer("num_quantizers", 16),
        upsample_rates=section.integers("upsample_rates", (8, 5, 4, 3)),
        upsampling_ratios=section.integers("upsampling_ratios", (2, 2)))


def _audio_encoder(section: JsonSection) -> AudioEncoderConfig:
    return AudioEncoderConfig(raw=dict(section.data), n_window=section.integer("n_window", 50),
                              num_mel_bins=section.integer("num_mel_bins", 128),
                              output_dim=section.integer("output_dim"))


def _special_tokens(top: JsonSection, thinker: JsonSection) -> SpecialTokens:
    top_ids = {name: top.integer(name, default, minimum=0) for name, default in _TOP_TOKEN_DEFAULTS.items()}
    return SpecialTokens(**top_ids, audio_token_id=thinker.integer("audio_token_id", 151646, minimum=0),
                         audio_start_token_id=thinker.integer("audio_start_token_id", 151647, minimum=0))


_TOP_TOKEN_DEFAULTS = {"im_start_token_id": 151644, "im_end_token_id": 151645, "system_token_id": 8948,
                       "user_token_id": 872, "assistant_token_id": 77091, "tts_pad_token_id": 151671,
                       "tts_bos_token_id": 151672, "tts_eos_token_id": 151673}


def _check_consistency(config: Qwen3OmniConfig, top: JsonSection) -> None:
    vocab = config.thinker.vocab_size
    for name, value in vars(config.tokens).items():
        where = top if name in _TOP_TOKEN_DEFAULTS else top.section("thinker_config")
        if value >= vocab:
            raise where.error(name, f"({value}) is not below thinker_config.text_config.vocab_size ({vocab})")
    _require_equal(top, "code2wav_config.num_quantizers", config.code2wav.num_quantizers,
                   "talker_config.num_code_groups", config.talker.num_code_groups)
    _require_equal(top, "thinker_config.audio_config.output_dim", config.audio.output_dim,
                   "thinker_config.text_config.hidden_size", config.thinker.hidden_size)


def _require_equal(section: JsonSection, name: str, value: int, other_name: str, other: int) -> None:
    if value != other:
        raise section.error(name, f"({value}) must equal {other_name} ({other})")


def _require_value(section: JsonSection, name: str, supported: object) -> None:
    value = section.data.get(name)
    if value is not None and value != supported:
        raise section.error(name, f"must be {supported!r} (the only value supported), got {value!r}")


DEFAULT_SPEAKER = "ethan"  # the reference generate's default voice ("Ethan")


def default_speaker(speakers: dict[str, int]) -> str:
    """The reference's default voice where the folder has it, else the folder's first speaker."""
    if not speakers:
        raise ValueError("config.json: talker_config.speaker_id names no speaker")
    return DEFAULT_SPEAKER if DEFAULT_SPEAKER in speakers else next(iter(speakers))
