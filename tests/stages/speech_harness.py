"""The real speech stages (Whisper tiny.en, Piper) as engines on a clock, stepped by hand."""

from __future__ import annotations

import time

from stages.config import SchedulerConfig
from stages.engine import StageEngine
from stages.factory import build_engine
from stages.models.asr_whisper import WhisperConfig
from stages.models.tts_piper import PiperVoiceConfig
from stages.plan import StageOutput
from stages.stage_spec import StageSpec


class SteppedEngine:
    """A stage engine stepped on the test's thread (one thread for its model), its outputs collected."""

    def __init__(self, kind: str, model: WhisperConfig | PiperVoiceConfig, max_num_seqs: int = 4) -> None:
        self.outputs: list[StageOutput] = []
        spec = StageSpec(kind, kind, model, SchedulerConfig(max_num_seqs=max_num_seqs), threads=1)
        self.engine: StageEngine = build_engine(spec, self.outputs.extend, time.monotonic)

    def step(self) -> list[StageOutput]:
        outputs = self.engine.step()
        self.outputs.extend(outputs)
        return outputs

    def drain(self, max_steps: int = 100) -> list[StageOutput]:
        """Apply what was submitted, then step until no request is left (or `max_steps`); what came out."""
        start = len(self.outputs)
        self.step()
        for _ in range(max_steps):
            if not self.engine.scheduler.requests:
                break
            self.step()
        return self.outputs[start:]


def asr_engine() -> SteppedEngine:
    return SteppedEngine("asr", WhisperConfig())


def tts_engine() -> SteppedEngine:
    return SteppedEngine("tts", PiperVoiceConfig())
