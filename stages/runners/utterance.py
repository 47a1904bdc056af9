"""Runner of an encoder that encodes each utterance whole (Qwen3-Omni's audio encoder)."""

from __future__ import annotations

import torch

from stages.plan import RunnerOutput, SchedulerPlan
from stages.runners.base import ModelRunner


class UtteranceRunner(ModelRunner):
    """Encodes each planned utterance (`model.encode(pcm) -> [rows, hidden]`); results are its rows."""

    def __init__(self, model) -> None:
        self.model = model

    @torch.inference_mode()
    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        return RunnerOutput({c.request.request_id: self.model.encode(c.request.audio.numpy()) for c in plan.chunks})
