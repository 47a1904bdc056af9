"""A pipeline that hears no audio: no stage before the thinker; the user's items are text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.session.hearing.base import Hearing

if TYPE_CHECKING:
    from orchestrator.config import PipelineConfig


@dataclass(frozen=True)
class TextOnly(Hearing):
    """Neither encodes nor transcribes: every request for audio is refused (see Hearing)."""

    @classmethod
    def of(cls, config: PipelineConfig) -> TextOnly:
        return cls(config.graph.input_path)
