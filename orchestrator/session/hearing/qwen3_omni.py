"""Qwen3-Omni's hearing: a user's 16 kHz utterance, whole -> the audio encoder -> rows into the thinker context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from orchestrator.session.hearing.base import Hearing
from stages.models.qwen3_omni.audio_rows import AudioRows
from stages.requests.utterance import UtteranceRequest

if TYPE_CHECKING:
    from orchestrator.config import PipelineConfig


@dataclass(frozen=True)
class Qwen3OmniHearing(Hearing):
    """The encoder takes an utterance once it has ended (its features are normalized over all of it) and
    gives `rows(num_samples)` rows, at most `max_rows` (the encoder stage's budget a round); a full-duplex
    stream, which needs audio encoded as it comes, is refused."""

    rows: AudioRows
    max_rows: int
    encodes: ClassVar[bool] = True

    @classmethod
    def of(cls, config: PipelineConfig) -> Qwen3OmniHearing:
        audio = config.encoder.model.audio
        return cls(config.graph.input_path, AudioRows(audio.n_window, audio.hop_length),
                   config.encoder.scheduler.max_num_batched_tokens)

    def check_duplex(self) -> None:
        raise ValueError("full-duplex streams are not served with Qwen3-Omni: its audio encoder takes whole "
                         "utterances")

    def encoder_request(self, request_id: str, now: float, chunk_frames: int | None = None) -> UtteranceRequest:
        if chunk_frames is not None:
            self.check_duplex()
        return UtteranceRequest(request_id, now, self.rows, self.max_rows)
