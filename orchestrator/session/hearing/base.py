"""The seam between a session and its pipeline's input shape: the shape's frozen numbers and the
requests that carry a user's audio to the thinker (a Hearing)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from orchestrator.datapath.stage_bus import StageBus
from orchestrator.interaction.events import UserTranscript
from orchestrator.session.transcription import Transcription
from stages.kinds import StageKind
from stages.requests import EncoderRequest

if TYPE_CHECKING:
    from orchestrator.config import PipelineConfig


@dataclass(frozen=True)
class Hearing(ABC):
    """An input shape's numbers, read once from the pipeline config (subclasses: frozen dataclasses).

    The user's input goes along `path` (the graph's stages before the thinker; empty: text only).
    A shape overrides what its path has; what it lacks is refused with a ValueError whose message
    the client sees:

    - `encodes`: the user's 16 kHz audio reaches the thinker as embeddings, through an encoder
      (a user item's audio, and a full-duplex stream's).
    - `check_duplex()`: a full-duplex stream can be heard (its audio encoded as it comes), else the
      ValueError saying why not.
    - `encoder_request(request_id, now, chunk_frames)`: the encoder request that encodes such audio,
      in chunks of `chunk_frames` frames (None: the shape's own chunk).
    - `transcribes`: the user's speech reaches the thinker as text, through an ASR stage: a user
      item's audio is transcribed, never encoded.
    - `transcription(bus, session_id, item_id, on_text, partials)`: a new ASR request for user item
      `item_id`'s speech, its transcripts to `on_text` (with `partials`, partial ones as often as the
      shape says).
    """

    path: tuple[StageKind, ...]
    encodes: ClassVar[bool] = False
    transcribes: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def of(cls, config: PipelineConfig) -> Hearing:
        """The shape's numbers in `config`, whose graph's input path is this shape's."""

    def check_duplex(self) -> None:
        raise ValueError("full duplex streams audio into the thinker through an encoder; this pipeline has none")

    def encoder_request(self, request_id: str, now: float, chunk_frames: int | None = None) -> EncoderRequest:
        raise ValueError("this pipeline takes no audio: its graph has no encoder")

    def transcription(self, bus: StageBus, session_id: str, item_id: str, on_text: Callable[[UserTranscript], None],
                      partials: bool = False) -> Transcription:
        raise ValueError("this pipeline transcribes no speech: its graph has no asr stage")
