"""Frozen configuration of the stage pipeline (built by `liveserve` from YAML)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.datapath.stage_graph import StageGraph
from stages.config import SamplingParams
from stages.kinds import StageKind
from stages.stage_spec import StageSpec
from stages.validation import require_number, require_positive_ints

ENCODER_FRAME_MS = 80  # one thinker audio token (12.5 Hz)
MAX_FRAME_MS = 2000


@dataclass(frozen=True)
class InteractionConfig:
    """How sessions' interaction is read: what to assume of a user before their session shows otherwise
    (seconds), and when a reply starts.

    `reply_gap_s`: from the end of a reply's playback to the user's next speech;
    `speech_lead_s`: from speech start to the turn that needs the context; each
    session's own figures replace them as moving averages with weight `ema_weight`.
    `pause_ms`: silence after which the user's speech counts as paused (or half the silence that ends
    the turn, if that is less): the turn may end there, so the speech so far is transcribed, the KV
    preloaded and, with `preemptive_reply` where the pipeline transcribes speech, the reply started
    and held back until the turn ends. If the user goes on, that reply is dropped unseen: its compute
    was spent for nothing.
    """

    reply_gap_s: float = 2.0
    speech_lead_s: float = 2.0
    ema_weight: float = 0.3
    pause_ms: int = 200
    preemptive_reply: bool = True

    def __post_init__(self) -> None:
        for name in ("reply_gap_s", "speech_lead_s"):
            require_number(self, name, lambda v: 0 <= v < 3600, "a number of seconds in [0, 3600)")
        require_number(self, "ema_weight", lambda v: 0 < v <= 1, "a number in (0, 1]")
        require_number(self, "pause_ms", lambda v: 0 <= v <= 10_000, "a number of ms in [0, 10000]")


@dataclass(frozen=True)
class DuplexConfig:
    """Full-duplex sessions: every `frame_ms` (a whole number of the encoder's 80 ms frames,
    at most 2 s) each session's new audio enters its resident thinker request, which then
    decodes up to `tokens_per_frame` tokens. `expected_session_s`: how long a session is
    expected to stream (the KV saturation forecast warns when the pool would fill sooner).
    """

    frame_ms: int = 80
    tokens_per_frame: int = 1
    expected_session_s: float = 600.0

    def __post_init__(self) -> None:
        require_positive_ints(self, "frame_ms", "tokens_per_frame")
        if self.frame_ms % ENCODER_FRAME_MS or not ENCODER_FRAME_MS <= self.frame_ms <= MAX_FRAME_MS:
            raise ValueError(f"frame_ms must be a multiple of {ENCODER_FRAME_MS} in [{ENCODER_FRAME_MS}, {MAX_FRAME_MS}], "
                             f"got {self.frame_ms}")
        if self.tokens_per_frame > 16:
            raise ValueError(f"tokens_per_frame must be at most 16, got {self.tokens_per_frame}")
        require_number(self, "expected_session_s", lambda v: 0 < v < math.inf, "a finite number of seconds > 0")

    @property
    def encoder_frames(self) -> int:
        """Encoder output frames (thinker audio tokens) per duplex frame."""
        return self.frame_ms // ENCODER_FRAME_MS


@dataclass(frozen=True)
class PipelineConfig:
    """The stages of a graph (a spec for each kind in it, None for the others), the graph, default
    sampling of the thinker and the talker (None without one), what to assume of users, and duplex."""

    encoder: StageSpec | None
    thinker: StageSpec
    talker: StageSpec | None
    vocoder: StageSpec | None
    thinker_sampling: SamplingParams
    talker_sampling: SamplingParams | None
    graph: StageGraph = StageGraph.omni()
    interaction: InteractionConfig = InteractionConfig()
    duplex: DuplexConfig = DuplexConfig()
    asr: StageSpec | None = None
    tts: StageSpec | None = None

    def __post_init__(self) -> None:
        for kind in StageKind:
            spec = getattr(self, kind)
            if (spec is None) == (kind in self.graph.kinds):
                raise ValueError(f"stage {kind!r} is {'not ' if spec is None else ''}configured but "
                                 f"{'in' if spec is None else 'not in'} the graph")
            if spec is not None and spec.kind != kind:
                raise ValueError(f"stage {kind!r} is configured as a {spec.kind!r} stage")
        if (self.talker is None) != (self.talker_sampling is None):
            raise ValueError("talker sampling goes with a talker stage")

    @property
    def model_family(self) -> str:
        """"qwen3-omni" for a Qwen3-Omni folder's stages, "" for the others (whose graph alone says their shape)."""
        return "qwen3-omni" if self.thinker.is_qwen3_omni else ""

    @property
    def stages(self) -> tuple[StageSpec, ...]:
        """The specs, in the order a spoken turn goes through them."""
        return tuple(getattr(self, kind) for kind in self.graph.kinds)
