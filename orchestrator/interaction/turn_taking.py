"""How a session's turns are taken: the kind of turn detection and what speech starting and stopping do."""

from __future__ import annotations

from dataclasses import dataclass

from monitor import EAGERNESS_NAMES, SemanticTurnConfig, TurnDetectionConfig

DETECTIONS = ("server_vad", "semantic_vad")


@dataclass(frozen=True)
class TurnTaking:
    """Server-side turn detection and what the end and the start of speech do.

    kind: "server_vad" (the turn ends after `silence_duration_ms` of silence) or "semantic_vad" (an
    end-of-turn model judges each pause, `eagerness` sets how sure it must be and the silence that ends
    the turn regardless; silence_duration_ms is unused). threshold and prefix_padding_ms are the VAD's.
    """

    threshold: float = 0.5
    prefix_padding_ms: int = 300
    silence_duration_ms: int = 500
    create_response: bool = True
    interrupt_response: bool = True
    kind: str = "server_vad"
    eagerness: str = "auto"

    def __post_init__(self) -> None:
        if self.kind not in DETECTIONS:
            raise ValueError(f"kind must be one of {DETECTIONS}, got {self.kind!r}")
        if self.eagerness not in EAGERNESS_NAMES:
            raise ValueError(f"eagerness must be one of {EAGERNESS_NAMES}, got {self.eagerness!r}")

    @property
    def detection(self) -> TurnDetectionConfig | SemanticTurnConfig:
        """The monitor's settings for this kind of detection (the orchestrator builds its detector)."""
        if self.kind == "semantic_vad":
            return SemanticTurnConfig(self.eagerness, self.threshold, self.prefix_padding_ms)
        return TurnDetectionConfig(self.threshold, self.prefix_padding_ms, self.silence_duration_ms)
