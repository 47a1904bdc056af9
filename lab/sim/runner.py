"""A runner that computes nothing: it prices the plan with the cost model and gives each request a
placeholder of the right shape (zeros, a filler token), so the real scheduler and requests run on."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lab.sim.cost_model import ChunkCost, DeviceSpec, ModelShape, step_cost
from lab.sim.step_noise import MachineNoise, StepJitter
from stages.config import WindowSpec
from stages.plan import RunnerOutput, ScheduledChunk, SchedulerPlan
from stages.runners.base import ModelRunner

SIMULATED_KINDS = ("encoder", "thinker", "talker", "vocoder")


@dataclass(frozen=True)
class Placeholders:
    """The shapes a stage's results take: the width of an encoder frame's or a thinker token's row,
    PCM samples per codec frame, a vocoder's left-context frames (decoded again with each chunk), and
    the token a thinker "generates" (an ordinary word, so that the reply is spoken)."""

    width: int = 0
    samples_per_frame: int = 0
    left_context: int = 0
    filler_token: int = 0


class SimulatedRunner(ModelRunner):
    """Executes nothing; `last_step_s` is what the plan would take on `device` (see cost_model.step_cost),
    times the machine's factor when the plan starts (`jitter`, drawn from `seed`: see step_noise): a step's
    time spread around its price with the price as its mean, as a real machine's steps of one shape spread.

    Results: an encoder gives [frames, width] zeros; a thinker, where its request wants a sample, the
    filler token, with a zero hidden state; a talker codec frame 0; a vocoder
    zero PCM for its frames. A thinker's or talker's chunk attends to the positions before it (with a
    `window`, at most its sinks and window)."""

    def __init__(self, kind: str, model: ModelShape, device: DeviceSpec, shapes: Placeholders,
                 window: WindowSpec | None = None, jitter: StepJitter = StepJitter(), seed: str = "") -> None:
        if kind not in SIMULATED_KINDS:
            raise ValueError(f"a {kind} stage cannot be simulated (simulated kinds: {', '.join(SIMULATED_KINDS)})")
        self.kind, self.model, self.device, self.shapes, self.window = kind, model, device, shapes, window
        self.noise = MachineNoise(jitter, seed)
        self.last_step_s = 0.0

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        price = step_cost(self.model, self.device, [self._cost(c) for c in plan.chunks]).seconds
        self.last_step_s = price * self.noise.factor(plan.now)
        results = {}
        for chunk in plan.chunks:
            result = self._result(chunk)
            if result is not None:
                results[chunk.request.request_id] = result
        return RunnerOutput(results)

    def _cost(self, chunk: ScheduledChunk) -> ChunkCost:
        if self.kind == "vocoder":
            return ChunkCost(chunk.num_tokens + min(chunk.start, self.shapes.left_context), 0, 0)
        if self.kind == "encoder":
            return ChunkCost(chunk.num_tokens, 0, 0)
        context = chunk.start if self.window is None else min(chunk.start, self.window.sinks + self.window.tokens)
        return ChunkCost(chunk.num_tokens, context, int(chunk.request.wants_sample(chunk.end)))

    def _result(self, chunk: ScheduledChunk):
        request = chunk.request
        if self.kind == "encoder":
            return torch.zeros(chunk.num_tokens, self.shapes.width)
        if self.kind == "vocoder":
            return torch.zeros(chunk.num_tokens * self.shapes.samples_per_frame)
        if not request.wants_sample(chunk.end):
            return None
        if self.kind == "talker":
            return 0
        return self.shapes.filler_token, torch.zeros(self.shapes.width)
