"""tiny-omni's hearing: 16 kHz audio -> encoder -> embeddings into the thinker context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from orchestrator.session.hearing.base import Hearing
from stages.requests import EncoderRequest

if TYPE_CHECKING:
    from orchestrator.config import PipelineConfig


@dataclass(frozen=True)
class EncoderHearing(Hearing):
    """The encoder turns each `samples_per_frame` samples into a frame, encoding `chunk_frames` at a time."""

    chunk_frames: int
    samples_per_frame: int
    encodes: ClassVar[bool] = True

    @classmethod
    def of(cls, config: PipelineConfig) -> EncoderHearing:
        encoder = config.encoder.model
        return cls(config.graph.input_path, encoder.chunk_frames, encoder.samples_per_frame)

    def check_duplex(self) -> None:
        pass

    def encoder_request(self, request_id: str, now: float, chunk_frames: int | None = None) -> EncoderRequest:
        chunk = self.chunk_frames if chunk_frames is None else chunk_frames
        return EncoderRequest(request_id, now, chunk, self.samples_per_frame)
