"""The seam between a turn and its pipeline's reply shape: the shape's frozen numbers (a VoiceGeometry)
and the per-turn strategy that turns a reply into audio and maps heard audio back (a Reply)."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from orchestrator.datapath.request_id import RequestId
from orchestrator.datapath.stage_bus import OutputHandler, StageBus
from orchestrator.datapath.stage_graph import Edge
from orchestrator.session.events import AudioDelta, TurnUsage, UnheardWork
from stages.kinds import StageKind
from stages.plan import StageOutput
from stages.requests import ThinkerStep
from stages.requests.talker_context import TalkerContextRule

if TYPE_CHECKING:
    from orchestrator.config import PipelineConfig


class SessionRequests(Protocol):
    """What a reply may keep in its session beyond its turn (the SessionContext holds it)."""

    def resident_talker(self) -> tuple[RequestId, bool]:
        """The session's resident talker request id, and whether the caller must add the request."""


class Voice(Protocol):
    """How a reply's audio maps back to its spoken tokens (kept by its context segment after the turn)."""

    def heard_tokens(self, num_spoken: int, heard_ms: float) -> int:
        """Of the first `num_spoken` spoken tokens, those heard once `heard_ms` of the audio played."""


@dataclass(frozen=True)
class VoiceGeometry(ABC):
    """A reply shape's numbers, read once from the pipeline config (subclasses: frozen dataclasses).

    A reply goes along `path` (the graph's edges from the thinker to the audio); its audio comes at
    `sample_rate` and is counted in frames of `frame_ms` ms (`samples_per_frame` samples). A frame
    counts as heard once its playback had started (frame k starts at k * frame_ms).
    """

    path: tuple[Edge, ...]
    sample_rate: int
    samples_per_frame: int
    frame_ms: float

    @classmethod
    @abstractmethod
    def of(cls, config: PipelineConfig) -> VoiceGeometry:
        """The shape's numbers in `config`, whose graph's reply path is this shape's."""

    @abstractmethod
    def reply(self, session_id: str, turn_index: int, bus: StageBus, usage: TurnUsage,
              session: SessionRequests | None = None) -> Reply:
        """The strategy of one turn's reply (turn `turn_index` of the session), counting its work in `usage`;
        a shape that keeps requests across turns keeps them in `session`."""

    @property
    def ms_per_token(self) -> float | None:
        """Reply audio per spoken text token (None: not known before it is spoken, as through a TTS)."""
        return None

    @property
    def talker_rule(self) -> TalkerContextRule | None:
        """Which rows of the context the talker reads (a talker that reads the conversation); None: none."""
        return None

    def frames_started(self, heard_ms: float) -> int:
        """Frames of a reply whose playback had started by `heard_ms`."""
        return math.ceil(heard_ms / self.frame_ms)


class Reply(ABC):
    """One turn's reply on its way to audio: one subclass per reply shape, one instance per turn.

    The Turn owns the thinker side (context segment, text, usage of the thinker, events, teardown);
    its Reply owns the requests of the reply path and never calls the Turn. The Turn calls, on the
    event loop, in this order:

    - `ids`: the reply's request per stage of its path, fixed at construction (empty: not spoken).
      Their outputs go to the owner given to `start`, who hands each (without an error) to `on_output`
      and disowns them all when the turn ends.
    - `start(owner, now, num_turns)`: add the requests to their stages; sampling seeds are offset by
      `num_turns` (the session's turns, this one included, less those taken back).
    - `speak(position, step, text, is_special)`: the thinker's `position`-th token of this reply (`step`;
      `text`, its detokenized text, maybe ""; `is_special`: a special token). Send along the path what
      the shape voices of it; True if it will become audio (it then counts in `heard_tokens`), False if not.
    - `end_text()`: the thinker is done: close the path's input. True if audio is still to come (the
      turn ends once `is_finished`), False if the reply ends now.
    - `on_output(kind, output)`: an output of the stage `kind` on the path: on to the next stage, or,
      out of the last, the audio to play (None: none in it). The reply counts its stages' work in the
      usage it was given (codec_frames, vocoder_frames, audio_samples); `is_finished` turns True when
      the last stage's request finished.
    - `publish_playback(thinker_id, started, drained_at, delivered_ms)`: tell the stages, through the
      bus's board, how far ahead of the user's playback (started; the clock time the delivered audio runs
      out; the ms of audio delivered, None where nothing tracks it: the session's
      InteractionState.playback) the thinker request `thinker_id` and each request of the path are.
      Called after each stage output and each playback fact, until the turn ends.
    - `abort()`: stop every request of the path (the turn was cancelled or failed).

    Heard audio, pure (during and after the turn; later context cuts do not change it):
    `heard_tokens(num_spoken, heard_ms)` is the Voice protocol; `voice` is what the reply's context
    segment keeps to map heard audio after the turn (None: the reply is not spoken); `unheard(heard_ms)`
    is the work generated so far beyond the first `heard_ms` ms of the audio (see UnheardWork).
    """

    ids: dict[StageKind, RequestId]
    is_finished: bool

    @abstractmethod
    def start(self, owner: OutputHandler, now: float, num_turns: int) -> None: ...

    @abstractmethod
    def speak(self, position: int, step: ThinkerStep, text: str, is_special: bool = False) -> bool: ...

    @abstractmethod
    def end_text(self) -> bool: ...

    @abstractmethod
    def on_output(self, kind: StageKind, output: StageOutput) -> AudioDelta | None: ...

    @abstractmethod
    def publish_playback(self, thinker_id: str, started: bool, drained_at: float,
                         delivered_ms: float | None) -> None: ...

    @abstractmethod
    def abort(self) -> None: ...

    @property
    @abstractmethod
    def voice(self) -> Voice | None: ...

    @abstractmethod
    def heard_tokens(self, num_spoken: int, heard_ms: float) -> int: ...

    @abstractmethod
    def unheard(self, heard_ms: float) -> UnheardWork: ...
