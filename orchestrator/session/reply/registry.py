"""Reply shapes by the stages of a graph's reply path (and the model family, where a family speaks its own way):
a new shape is a new file and one line here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.datapath.stage_bus import StageBus
from orchestrator.datapath.stage_graph import StageGraph
from orchestrator.session.events import TurnUsage
from orchestrator.session.reply.base import Reply, SessionRequests, VoiceGeometry
from orchestrator.session.reply.qwen3_omni import Qwen3OmniVoice
from orchestrator.session.reply.silent import SilentReply
from orchestrator.session.reply.talker_vocoder import TalkerVocoderVoice
from orchestrator.session.reply.tts import TTSVoice
from stages.kinds import StageKind

if TYPE_CHECKING:
    from orchestrator.config import PipelineConfig

REPLY_SHAPES: dict[tuple[StageKind, ...], type[VoiceGeometry]] = {
    (StageKind.TALKER, StageKind.VOCODER): TalkerVocoderVoice,
    (StageKind.TTS,): TTSVoice,
}
FAMILY_REPLY_SHAPES: dict[str, dict[tuple[StageKind, ...], type[VoiceGeometry]]] = {
    "qwen3-omni": {(StageKind.TALKER, StageKind.VOCODER): Qwen3OmniVoice},
}


def reply_shape(graph: StageGraph, family: str = "") -> type[VoiceGeometry] | None:
    """The shape of `graph`'s replies, by the stages after the thinker (the model `family`'s own if it has
    one; None: its replies are text only); ValueError for a reply path no shape speaks through."""
    stages = tuple(edge.target for edge in graph.reply_path)
    if not stages:
        return None
    if stages in FAMILY_REPLY_SHAPES.get(family, {}):
        return FAMILY_REPLY_SHAPES[family][stages]
    if stages not in REPLY_SHAPES:
        raise ValueError(f"no reply shape speaks through thinker -> {' -> '.join(stages)}; "
                         f"known: {', '.join(' -> '.join(path) for path in REPLY_SHAPES)}")
    return REPLY_SHAPES[stages]


def voice_of(config: PipelineConfig) -> VoiceGeometry | None:
    """The numbers of `config`'s reply shape (None: its replies are text only)."""
    shape = reply_shape(config.graph, config.model_family)
    return None if shape is None else shape.of(config)


def new_reply(voice: VoiceGeometry | None, speak: bool, session_id: str, turn_index: int, bus: StageBus,
              usage: TurnUsage, session: SessionRequests | None = None) -> Reply:
    """One turn's reply: in `voice`'s shape if the request asks to `speak` and the pipeline has a voice,
    else a SilentReply (`session`: where a shape keeps requests across turns)."""
    if voice is None or not speak:
        return SilentReply()
    return voice.reply(session_id, turn_index, bus, usage, session)
