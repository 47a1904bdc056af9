"""The real speech stages (Whisper tiny.en, Piper) as engines on a clock, stepped by hand, and word error rate."""

from __future__ import annotations

import re
import time

from stages.config import SchedulerConfig
from stages.engine import StageEngine
from stages.factory import build_engine
from stages.models.asr_whisper import WhisperConfig
from stages.models.tts_piper import PiperVoiceConfig
from stages.plan import StageOutput
from stages.stage_spec import StageSpec

SPELLED = {"mr": "mister", "mrs": "missus"}


def normalized_words(text: str) -> list[str]:
    """Lower case, hyphens as spaces, no punctuation, a few abbreviations spelled out."""
    words = re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("-", " ")).split()
    return [SPELLED.get(word, word) for word in words]


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / words of the reference, on normalized words."""
    ref, hyp = normalized_words(reference), normalized_words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, word in enumerate(ref, 1):
        previous, row[0] = row[0], i
        for j, heard in enumerate(hyp, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (word != heard))
    return row[-1] / max(1, len(ref))


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
