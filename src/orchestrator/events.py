"""What a turn emits to its consumer, in order; `TurnDone` always comes last."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class AudioDelta:
    """Float PCM in [-1, 1] at `sample_rate`."""

    pcm: np.ndarray
    sample_rate: int

    @property
    def duration_ms(self) -> float:
        return 1000.0 * len(self.pcm) / self.sample_rate


@dataclass
class TurnUsage:
    """Work per stage for one turn (positions computed or produced)."""

    input_tokens: int = 0
    text_tokens: int = 0
    codec_frames: int = 0
    audio_samples: int = 0


@dataclass(frozen=True)
class TurnDone:
    """status: completed | cancelled | incomplete (length) | failed (error says why)."""

    status: str
    usage: TurnUsage
    error: str | None = None
    finish_reason: str | None = None


TurnEvent = TextDelta | AudioDelta | TurnDone
