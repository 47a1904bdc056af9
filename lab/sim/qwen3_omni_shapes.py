"""Qwen3-Omni's four parts as cost-model shapes, from its config.json: what a sim spec's `shapes` gives.

Each part is priced as its transformer, a ModelShape whose fields are config.json's, plus extras.
`extra_params`: the part's exact parameter count (its module built on the meta device, as
stages.qwen3_omni_parts.num_parameters counts it) less the transformer's, so that `total_params` is the part's.
`extra_flops_per_token`: what one of the stage's tokens computes outside those layers:
- thinker (thinker_config.text_config: experts of moe_intermediate_size; the layers that mlp_only_layers and
  decoder_sparse_step leave dense, an MLP of intermediate_size): nothing (its other weights are norms).
- talker (talker_config.text_config, experts of moe_intermediate_size; a token is a codec frame): its shared
  expert (gate, up and down of shared_expert_intermediate_size, and the expert's gate), one thinker row's
  projection (thinker_hidden_size -> intermediate_size -> hidden_size), and its code predictor's work for the
  frame. The reference generates codes 1..G-1 (G = num_code_groups) in G-1 steps over G positions (the talker's
  hidden state and code 0, then codes 1..G-2), each step through one of its G-1 heads: priced by step_flops as
  one chunk of G new positions with G-1 sampled rows of code_predictor_config's dense decoder.
- encoder (thinker_config.audio_config: encoder_layers of d_model, encoder_attention_heads, an ungated MLP of
  encoder_ffn_dim; a token is an output frame): its three 2-D convolutions over an output frame's mel frames,
  and conv_out, proj1 and proj2 (2 FLOPs a weight).
- vocoder (code2wav_config's transformer; a token is a codec frame): its upsampling and convolutional decoder,
  whose weights each run once per sample of their rate, up to total_upsample samples a frame.
The convolutions' FLOPs are counted by torch's FlopCounterMode over a meta-device forward (shapes, no data).
The audio tower's and code2wav's fields are read through the reference's config classes, whose defaults
fill what config.json leaves out.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from lab.sim.cost_model import ChunkCost, ModelShape, step_flops
from liveserve.config.loader import load_config, shipped_configs
from liveserve.config.reader import ConfigError
from stages.models.model_folder import ModelFolderError
from stages.models.qwen3_omni.audio_encoder import build_audio_encoder
from stages.models.qwen3_omni.code2wav import build_code2wav
from stages.models.qwen3_omni.config import MoeDecoderConfig, Qwen3OmniConfig, TalkerConfig
from stages.models.qwen3_omni.folder import Qwen3OmniFolder
from stages.models.qwen3_omni.talker import Qwen3OmniTalker
from stages.models.qwen3_omni.thinker import Qwen3OmniThinker

MEL_FRAMES = 800  # the encoder's convolutions are counted over this many mel frames (100 output frames)
CODEC_FRAMES = 50  # code2wav's over this many codec frames


@functools.cache
def load_shapes(source: str, relative_to: Path) -> Mapping[str, ModelShape]:
    """The shape of each part (encoder, thinker, talker, vocoder) of the Qwen3-Omni model `source` names
    (see load_qwen3_omni); computed once per source in a process."""
    return MappingProxyType(part_shapes(load_qwen3_omni(source, relative_to)))


def load_qwen3_omni(source: str, relative_to: Path) -> Qwen3OmniConfig:
    """`source`: a Qwen3-Omni model folder (its config.json), or a served config, a file (a relative path is
    taken from `relative_to`) or a shipped one by name, whose model is Qwen3-Omni: the config.json of its
    model.folder where that folder is on this machine, else its model.declared (as the served config reads).
    ConfigError, in one line, if it is none of these."""
    path = relative_to / Path(source).expanduser()
    shipped = shipped_configs()
    if path.is_dir():
        try:
            return Qwen3OmniFolder(path).config()
        except ModelFolderError as exc:
            raise ConfigError(str(exc)) from None
    if not path.is_file() and source not in shipped:
        raise ConfigError(f"{source!r} is neither a Qwen3-Omni folder nor a served config (shipped: "
                          f"{', '.join(shipped)})")
    try:
        model = load_config(path if path.is_file() else shipped[source]).pipeline.thinker.model
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    if not isinstance(model, Qwen3OmniConfig):
        raise ConfigError(f"{source} does not serve a Qwen3-Omni model (its thinker is a {type(model).__name__}); "
                          "name a served config with model.folder, or a Qwen3-Omni folder")
    return model


def part_shapes(config: Qwen3OmniConfig) -> dict[str, ModelShape]:
    """Each part's shape, as the module's docstring derives it."""
    with torch.device("meta"):
        encoder, vocoder = build_audio_encoder(config.audio), build_code2wav(config.code2wav)
        thinker, talker = Qwen3OmniThinker(config.thinker), Qwen3OmniTalker(config.talker)
    return {"encoder": _with_extras(_encoder_layers(encoder.config), encoder, _encoder_frame_flops(encoder)),
            "thinker": _with_extras(_decoder_layers("thinker", config.thinker), thinker, 0.0),
            "talker": _with_extras(_decoder_layers("talker", config.talker.decoder), talker,
                                   _talker_frame_flops(config.talker)),
            "vocoder": _with_extras(_code2wav_layers(vocoder.config), vocoder, _code2wav_frame_flops(vocoder))}


def _with_extras(layers: ModelShape, part: nn.Module, flops_per_token: float) -> ModelShape:
    extra = sum(parameter.numel() for parameter in part.parameters()) - layers.total_params
    if extra < 0:
        raise ConfigError(f"{layers.name}: its shape counts {-extra:,} weights more than the part has")
    return dataclasses.replace(layers, extra_params=extra, extra_flops_per_token=flops_per_token)


def _decoder_layers(name: str, decoder: MoeDecoderConfig) -> ModelShape:
    """A thinker's or talker's layers: experts where is_sparse says, a dense MLP elsewhere."""
    dense = sum(not decoder.is_sparse(layer) for layer in range(decoder.num_layers))
    if dense == decoder.num_layers:
        mlp = {"intermediate": decoder.intermediate_size}
    else:
        mlp = {"intermediate": decoder.moe_intermediate_size, "num_experts": decoder.num_experts,
               "num_active_experts": decoder.num_experts_per_tok, "num_dense_layers": dense,
               "dense_intermediate": decoder.intermediate_size if dense else 0}
    return ModelShape(name, num_layers=decoder.num_layers, hidden=decoder.hidden_size, num_heads=decoder.num_heads,
                      num_kv_heads=decoder.num_kv_heads, head_dim=decoder.head_dim, vocab=decoder.vocab_size, **mlp)


def _talker_frame_flops(talker: TalkerConfig) -> float:
    """The shared expert, a thinker row's projection and the code predictor's G-1 steps, for one frame."""
    decoder, predictor, groups = talker.decoder, talker.code_predictor, talker.num_code_groups
    shared = decoder.num_layers * (3 * decoder.shared_expert_intermediate_size + 1) * decoder.hidden_size
    projection = (talker.thinker_hidden_size + decoder.hidden_size) * decoder.intermediate_size
    steps = ModelShape("code predictor", num_layers=predictor.num_layers, hidden=predictor.hidden_size,
                       num_heads=predictor.num_heads, num_kv_heads=predictor.num_kv_heads, head_dim=predictor.head_dim,
                       intermediate=predictor.intermediate_size, vocab=predictor.vocab_size)
    return 2 * (shared + projection) + step_flops(steps, [ChunkCost(groups, 0, groups - 1)])


def _encoder_layers(audio) -> ModelShape:
    return ModelShape("encoder", num_layers=audio.encoder_layers, hidden=audio.d_model,
                      num_heads=audio.encoder_attention_heads, num_kv_heads=audio.encoder_attention_heads,
                      head_dim=audio.d_model // audio.encoder_attention_heads, intermediate=audio.encoder_ffn_dim,
                      vocab=1, gated_mlp=False)


def _encoder_frame_flops(encoder: nn.Module) -> float:
    def convolutions() -> int:
        x = torch.zeros(1, 1, encoder.config.num_mel_bins, MEL_FRAMES)
        for conv in (encoder.conv2d1, encoder.conv2d2, encoder.conv2d3):
            x = conv(x)
        return x.shape[-1]

    projections = sum(layer.weight.numel() for layer in (encoder.conv_out, encoder.proj1, encoder.proj2))
    return _counted_flops_per_frame(convolutions) + 2 * projections


def _code2wav_layers(code2wav) -> ModelShape:
    head_dim = getattr(code2wav, "head_dim", None) or code2wav.hidden_size // code2wav.num_attention_heads
    return ModelShape("vocoder", num_layers=code2wav.num_hidden_layers, hidden=code2wav.hidden_size,
                      num_heads=code2wav.num_attention_heads, num_kv_heads=code2wav.num_key_value_heads,
                      head_dim=head_dim, intermediate=code2wav.intermediate_size, vocab=1)


def _code2wav_frame_flops(code2wav: nn.Module) -> float:
    def convolutions() -> int:
        x = torch.zeros(1, code2wav.config.hidden_size, CODEC_FRAMES)
        for block in itertools.chain(*code2wav.upsample, code2wav.decoder):
            x = block(x)
        return CODEC_FRAMES

    return _counted_flops_per_frame(convolutions)


def _counted_flops_per_frame(forward: Callable[[], int]) -> float:
    """FLOPs of `forward` (run on the meta device) over the frames it returns it ran."""
    with torch.device("meta"), FlopCounterMode(display=False) as counter:
        frames = forward()
    return counter.get_total_flops() / frames
