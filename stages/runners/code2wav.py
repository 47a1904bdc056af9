"""Runner of Qwen3-Omni's code2wav stage: chunks of codec frames (every codebook, with left context) to 24 kHz PCM."""

from __future__ import annotations

import torch

from stages.plan import RunnerOutput, SchedulerPlan
from stages.runners.base import ModelRunner


class Code2WavRunner(ModelRunner):
    """Decodes each planned chunk (`model.decode(codes [groups, frames], left_context)`); results are float PCM."""

    def __init__(self, model) -> None:
        self.model = model

    @torch.inference_mode()
    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        results = {}
        for chunk in plan.chunks:
            frames, context = chunk.request.chunk(chunk.start, chunk.end)
            results[chunk.request.request_id] = self.model.decode(frames.T, context)
        return RunnerOutput(results)
