"""What a turn, a user input or a duplex stream needs of the pipeline: a bus and its frozen geometry."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config import DuplexConfig, PipelineConfig
from orchestrator.datapath.stage_bus import StageBus
from orchestrator.datapath.stage_graph import StageGraph
from orchestrator.session.chat_template import ChatTemplate
from orchestrator.session.hearing.base import Hearing
from orchestrator.session.hearing.registry import hearing_of
from orchestrator.session.reply.base import VoiceGeometry
from orchestrator.session.reply.registry import voice_of
from stages.config import SamplingParams
from stages.kinds import StageKind
from stages.models.tokenizer import TextTokenizer


@dataclass(frozen=True)
class PipelineGeometry:
    """The numbers of a pipeline that its users compute with.

    `hearing` holds the numbers of the pipeline's input shape, picked by its graph's input path (see
    hearing/registry.py), and `voice` those of its reply shape, picked by its reply path (see
    reply/registry.py; None: replies are text only).
    """

    graph: StageGraph
    max_position: int
    is_windowed: bool  # the thinker keeps a bounded window: its context has no maximum length
    thinker_sampling: SamplingParams
    duplex: DuplexConfig
    hearing: Hearing
    voice: VoiceGeometry | None = None

    @property
    def takes_back_replies(self) -> bool:
        """A reply and the user item it answers can leave the context's tail unseen (see SessionContext.rollback):
        the thinker's KV is truncated in place (no window) and no talker keeps a context of its own."""
        return not self.is_windowed and StageKind.TALKER not in self.graph.kinds

    @classmethod
    def of(cls, config: PipelineConfig) -> PipelineGeometry:
        return cls(config.graph, config.thinker.model.max_position, config.thinker.window is not None,
                   config.thinker_sampling, config.duplex, hearing_of(config), voice_of(config))


@dataclass(frozen=True)
class Pipeline:
    """The narrow port of the pipeline's users: the stage bus, the geometry, the tokenizer and the
    thinker's chat template. They never see the orchestrator."""

    bus: StageBus
    geometry: PipelineGeometry
    tokenizer: TextTokenizer
    template: ChatTemplate

    @property
    def clock(self):
        return self.bus.clock
