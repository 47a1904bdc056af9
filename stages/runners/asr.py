"""Runner for the ASR stage: one transcription pass per planned request."""

from __future__ import annotations

from stages.models.asr_whisper import WhisperASR
from stages.plan import RunnerOutput, SchedulerPlan
from stages.requests.asr import ASRRequest, Transcript
from stages.runners.base import ModelRunner


class ASRRunner(ModelRunner):
    """Transcribes every planned request's speech so far, one request after another in the plan's
    order (faster-whisper has no batch API for independent streams; the scheduler's
    `max_num_seqs` bounds the passes of a step). A pass of a closed request is its final: the text
    of the pass before it when that one read all the speech."""

    def __init__(self, model: WhisperASR) -> None:
        self.model = model

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        results = {}
        for chunk in plan.chunks:
            request: ASRRequest = chunk.request
            speech = request.speech()
            text = request.reusable_text() if request.is_closed else None
            results[request.request_id] = Transcript(self.model.transcribe(speech) if text is None else text,
                                                     request.is_closed, len(speech))
        return RunnerOutput(results)
