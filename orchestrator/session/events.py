"""What a turn is asked for, and what it emits to its consumer, in order (`TurnDone` always last)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from orchestrator.session.tools import NO_TOOLS, ToolCall, Tools


@dataclass(frozen=True)
class TurnRequest:
    """How to answer: speak or only write, per-response sampling overrides, and the tools the reply may call
    (their choice; the system message describes the session's tools)."""

    speak: bool = True
    max_tokens: int | None = None
    temperature: float | None = None
    ignore_eos: bool = False
    tools: Tools = NO_TOOLS


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


@dataclass(frozen=True)
class UnheardWork:
    """Work a reply generated beyond what the listener heard of its first `heard_ms` ms of audio.

    A token or frame counts as heard once its playback had started. `text_tokens`:
    thinker tokens a cut at `heard_ms` drops from the context (those after the last
    heard spoken token); `codec_frames` / `vocoder_frames`: talker codec frames and
    vocoded (80 ms) frames whose playback had not started.
    """

    heard_ms: float
    text_tokens: int
    codec_frames: int
    vocoder_frames: int


@dataclass
class TurnUsage:
    """Work per stage for one turn (positions computed or produced).

    `unheard` is set when a cancel cut the reply at a known playback point, else None.
    """

    input_tokens: int = 0
    text_tokens: int = 0
    codec_frames: int = 0
    vocoder_frames: int = 0
    audio_samples: int = 0
    unheard: UnheardWork | None = None


@dataclass(frozen=True)
class TurnDone:
    """status: completed | cancelled | incomplete (length) | failed (error says why); `token_ids`: every token
    the thinker generated for the reply, in order (the stop token too); `tool_call`: the call the reply is
    (None: it is a message)."""

    status: str
    usage: TurnUsage
    error: str | None = None
    finish_reason: str | None = None
    token_ids: tuple[int, ...] = ()
    tool_call: ToolCall | None = None


TurnEvent = TextDelta | AudioDelta | TurnDone
