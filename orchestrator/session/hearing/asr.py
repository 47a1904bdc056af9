"""The voice agent's hearing: 16 kHz speech -> ASR stage -> transcript text into the thinker context."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from orchestrator.datapath.stage_bus import StageBus
from orchestrator.interaction.events import UserTranscript
from orchestrator.session.hearing.base import Hearing
from orchestrator.session.transcription import Transcription

if TYPE_CHECKING:
    from orchestrator.config import PipelineConfig


@dataclass(frozen=True)
class ASRHearing(Hearing):
    """A partial transcript waits for `partial_every_s` of new speech (None: finals only)."""

    partial_every_s: float | None
    transcribes: ClassVar[bool] = True

    @classmethod
    def of(cls, config: PipelineConfig) -> ASRHearing:
        return cls(config.graph.input_path, config.asr.model.partial_every_s)

    def transcription(self, bus: StageBus, session_id: str, item_id: str, on_text: Callable[[UserTranscript], None],
                      partials: bool = False) -> Transcription:
        return Transcription(bus, session_id, item_id, on_text, self.partial_every_s if partials else None)
