"""Frozen configuration of the stage pipeline (built by `liveserve` from YAML)."""

from __future__ import annotations

from dataclasses import dataclass

from stages.config import SamplingParams
from stages.factory import StageSpec
from stages.validation import require_positive_ints


@dataclass(frozen=True)
class ChunkSizes:
    """An edge between stages forwards `first_chunk` items at once, then `chunk` at a time."""

    first_chunk: int = 1
    chunk: int = 1

    def __post_init__(self) -> None:
        require_positive_ints(self, "first_chunk", "chunk")


@dataclass(frozen=True)
class PipelineConfig:
    """The four stages, the chunking of the streams between them and default sampling."""

    encoder: StageSpec
    thinker: StageSpec
    talker: StageSpec
    vocoder: StageSpec
    thinker_sampling: SamplingParams
    talker_sampling: SamplingParams
    thinker_to_talker: ChunkSizes = ChunkSizes(1, 1)
    talker_to_vocoder: ChunkSizes = ChunkSizes(4, 16)

    def __post_init__(self) -> None:
        for kind in ("encoder", "thinker", "talker", "vocoder"):
            if getattr(self, kind).kind != kind:
                raise ValueError(f"stage {kind!r} is configured as a {getattr(self, kind).kind!r} stage")

    @property
    def stages(self) -> tuple[StageSpec, ...]:
        return (self.encoder, self.thinker, self.talker, self.vocoder)
