"""Runner for the TTS stage: one segment of text to 24 kHz PCM per planned request."""

from __future__ import annotations

import torch

from stages.models.tts_piper import PiperTTS
from stages.plan import RunnerOutput, SchedulerPlan
from stages.requests.tts import TTSRequest
from stages.runners.base import ModelRunner


class TTSRunner(ModelRunner):
    """Speaks every planned segment, one after another in the plan's order (Piper synthesizes one
    text at a time); results are float PCM tensors in [-1, 1]."""

    def __init__(self, model: PiperTTS) -> None:
        self.model = model

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        results = {}
        for chunk in plan.chunks:
            request: TTSRequest = chunk.request
            results[request.request_id] = torch.from_numpy(self.model.synthesize(request.segment_text(chunk.start)))
        return RunnerOutput(results)
