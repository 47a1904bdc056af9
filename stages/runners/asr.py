"""Runner for the ASR stage: the planned requests' transcription passes, batched."""

from __future__ import annotations

from stages.models.asr_whisper import WhisperASR
from stages.plan import RunnerOutput, SchedulerPlan
from stages.requests.asr import ASRRequest, Transcript
from stages.runners.base import ModelRunner


class ASRRunner(ModelRunner):
    """Transcribes every planned request's speech so far, all in one batched pass (the scheduler's
    `max_num_seqs` bounds a step's passes). A pass of a closed request is its final: the text of
    the pass before it when that one read all the speech, with no pass of its own."""

    def __init__(self, model: WhisperASR) -> None:
        self.model = model

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        requests: list[ASRRequest] = [chunk.request for chunk in plan.chunks]
        texts = [request.reusable_text() if request.is_closed else None for request in requests]
        to_read = [i for i, text in enumerate(texts) if text is None]
        for i, text in zip(to_read, self.model.transcribe_batch([requests[i].speech() for i in to_read])):
            texts[i] = text
        return RunnerOutput({request.request_id: Transcript(text, request.is_closed, request.num_samples)
                             for request, text in zip(requests, texts)})
