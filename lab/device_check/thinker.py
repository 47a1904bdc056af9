"""Qwen3-Omni's native thinker (MoE) at a served config's shapes, a few of its layers, random weights drawn where it
computes; and the engine generations lab.engine times, over it."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

import torch

from kvtier import KVCacheManager, KVPoolConfig
from kvtier.config import DTYPES
from lab.engine import Generation
from lab.sim.cost_model import ChunkCost
from lab.sim.qwen3_omni_shapes import load_qwen3_omni
from stages.config import SchedulerConfig
from stages.models.qwen3_omni.config import MoeDecoderConfig
from stages.models.qwen3_omni.thinker import Qwen3OmniThinker
from stages.plan import RunnerOutput, SchedulerPlan
from stages.requests.base import StageRequest
from stages.runners.base import ModelRunner
from stages.runners.on_device import OnDeviceRunner
from stages.runners.qwen3_thinker import Qwen3ThinkerRunner

WEIGHT_STD = 0.02
BLOCK_SIZE = 16


def thinker_config(source: str) -> MoeDecoderConfig:
    """The thinker's sizes of the Qwen3-Omni model a served config (by name or file) declares or has."""
    return load_qwen3_omni(source, Path.cwd()).thinker


def build_thinker(config: MoeDecoderConfig, num_layers: int, device: str, dtype: str) -> Qwen3OmniThinker:
    """The thinker with its first `num_layers` layers, built on `device` in `dtype` (no copy of it elsewhere first),
    its matrices drawn from N(0, WEIGHT_STD^2) there (routers included: tokens go to random experts), its norms 1."""
    with torch.device(device), default_dtype(DTYPES[dtype]):
        model = Qwen3OmniThinker(dataclasses.replace(config, num_layers=num_layers))
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, WEIGHT_STD)
    return model.eval()


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


class StepRecorder(ModelRunner):
    """`runner`, recording each step's chunks as the cost model prices them (new tokens, context, sampled rows)."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.steps: list[list[ChunkCost]] = []

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        self.steps.append([ChunkCost(c.num_tokens, c.start, int(c.end >= len(c.request.token_ids)))
                           for c in plan.chunks])
        return self.runner.execute(plan)

    def attach(self, request: StageRequest) -> None:
        self.runner.attach(request)


class ThinkerRunners:
    """Makes the thinker's runner over each generation's pool (as the factory wraps one on a GPU), recorded;
    `last` is the latest one's recorder."""

    def __init__(self, model: Qwen3OmniThinker, device: str) -> None:
        self.model, self.device = model, device
        self.last: StepRecorder | None = None

    def __call__(self, kv: KVCacheManager) -> ModelRunner:
        runner = Qwen3ThinkerRunner(self.model, kv, accept_layer=self.model.config.num_layers)
        self.last = StepRecorder(runner if self.device == "cpu" else OnDeviceRunner(runner))
        return self.last


def generation(runners: ThinkerRunners, dtype: str, prompt_len: int, max_num_seqs: int,
               max_num_batched_tokens: int) -> Generation:
    """lab.engine's generation over the runners' model: FCFS, a pool of its KV shape (a block, grown to what each
    run needs) on its device in `dtype`, prompts of `prompt_len` ids."""
    config = runners.model.config
    pool = KVPoolConfig(num_blocks=1, block_size=BLOCK_SIZE, num_layers=config.num_layers,
                        num_kv_heads=config.num_kv_heads, head_dim=config.head_dim, dtype=dtype, device=runners.device)
    scheduler = SchedulerConfig("fcfs", max_num_seqs, max_num_batched_tokens)
    return Generation(pool, scheduler, runners, config.vocab_size, config.max_position, prompt_len)
