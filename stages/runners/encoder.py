"""Runner for the audio encoder stage: whole chunks of audio to thinker embeddings."""

from __future__ import annotations

import torch

from stages.models.audio_encoder import AudioEncoder
from stages.plan import RunnerOutput, SchedulerPlan
from stages.runners.base import ModelRunner


class EncoderRunner(ModelRunner):
    """Encodes every planned chunk of every request in one batch; results are [frames, hidden]."""

    def __init__(self, model: AudioEncoder) -> None:
        self.model = model.eval()

    @torch.inference_mode()
    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        per_request = [(c.request.request_id, c.request.chunks(c.start, c.end)) for c in plan.chunks]
        encoded = iter(self.model.encode_chunks([audio for _, chunks in per_request for audio in chunks]))
        return RunnerOutput({
            request_id: torch.cat([next(encoded) for _ in chunks]) for request_id, chunks in per_request
        })
