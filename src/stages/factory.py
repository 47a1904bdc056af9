"""Builds a stage engine (model, weights, KV pool, scheduler, runner) from its spec."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from kvtier import KVCacheManager, KVPoolConfig
from stages.config import SchedulerConfig
from stages.engine import StageEngine
from stages.interaction import InteractionView
from stages.models.audio_encoder import AudioEncoder, AudioEncoderConfig
from stages.models.decoder_config import DecoderConfig
from stages.models.llama import LlamaForCausalLM
from stages.models.packed_linear import pack_linears
from stages.models.talker import TalkerConfig, TalkerModel
from stages.models.vocoder import Vocoder, VocoderConfig
from stages.models.weights import init_deterministic, load_checkpoint
from stages.plan import StageOutput
from stages.runners.decoder import TalkerRunner, ThinkerRunner
from stages.runners.encoder import EncoderRunner
from stages.runners.vocoder import VocoderRunner
from stages.scheduler import Scheduler
from stages.validation import require_positive_ints

KINDS = ("encoder", "thinker", "talker", "vocoder")


@dataclass(frozen=True)
class KVSpec:
    """How many KV blocks a stage gets; the per-block shape comes from its model."""

    num_blocks: int = 1024
    block_size: int = 16

    def __post_init__(self) -> None:
        require_positive_ints(self, "num_blocks", "block_size")


@dataclass(frozen=True)
class StageSpec:
    """Everything needed to start one replica of one stage."""

    name: str
    kind: str
    model: AudioEncoderConfig | DecoderConfig | TalkerConfig | VocoderConfig
    scheduler: SchedulerConfig
    kv: KVSpec | None = None
    seed: int = 0
    checkpoint: Path | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind in ("thinker", "talker") and self.kv is None:
            raise ValueError(f"stage {self.name!r} ({self.kind}) needs a kv section")


def build_model(spec: StageSpec) -> torch.nn.Module:
    """The stage's model with seeded weights, or the checkpoint's when one is given."""
    model = {"encoder": AudioEncoder, "thinker": LlamaForCausalLM, "talker": TalkerModel, "vocoder": Vocoder}[spec.kind](spec.model)
    init_deterministic(model, spec.seed)
    if spec.checkpoint is not None:
        load_checkpoint(model, spec.checkpoint)
    pack_linears(model)
    return model.eval()


def decoder_of(spec: StageSpec) -> DecoderConfig:
    return spec.model.decoder if isinstance(spec.model, TalkerConfig) else spec.model


def build_engine(spec: StageSpec, emit: Callable[[list[StageOutput]], None], clock: Callable[[], float],
                 view: InteractionView | None = None) -> StageEngine:
    """The stage's engine; its scheduler reads playback telemetry from `view` (None: none)."""
    model = build_model(spec)
    kv = None
    if spec.kv is not None:
        decoder = decoder_of(spec)
        kv = KVCacheManager(KVPoolConfig(
            num_blocks=spec.kv.num_blocks, block_size=spec.kv.block_size, num_layers=decoder.num_layers,
            num_kv_heads=decoder.num_kv_heads, head_dim=decoder.head_dim,
        ))
    runner = {"encoder": EncoderRunner, "vocoder": VocoderRunner}.get(spec.kind)
    if runner is not None:
        runner = runner(model)
    else:
        runner = (ThinkerRunner if spec.kind == "thinker" else TalkerRunner)(model, kv)
    return StageEngine(spec.name, Scheduler(spec.scheduler, kv, clock, view), runner, emit)
