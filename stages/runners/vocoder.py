"""Runner for the vocoder stage: codec frames (with left context) to 24 kHz PCM."""

from __future__ import annotations

import torch

from stages.models.vocoder import Vocoder
from stages.plan import RunnerOutput, SchedulerPlan
from stages.runners.base import ModelRunner


class VocoderRunner(ModelRunner):
    """Decodes every planned chunk in one batch; results are float PCM in [-1, 1]."""

    def __init__(self, model: Vocoder) -> None:
        self.model = model.eval()

    @torch.inference_mode()
    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        chunks = [c.request.chunk(c.start, c.end) for c in plan.chunks]
        pcm = self.model.decode_chunks(chunks)
        return RunnerOutput({c.request.request_id: audio for c, audio in zip(plan.chunks, pcm)})
