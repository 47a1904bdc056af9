"""What a turn, a user input or a duplex stream needs of the pipeline: a bus and its frozen geometry."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.config import DuplexConfig, PipelineConfig
from orchestrator.datapath.stage_bus import StageBus
from orchestrator.datapath.stage_graph import StageGraph
from orchestrator.session.chat_template import ChatTemplate
from orchestrator.session.reply.base import VoiceGeometry
from orchestrator.session.reply.registry import voice_of
from stages.config import SamplingParams
from stages.kinds import StageKind
from stages.models.tokenizer import TextTokenizer


@dataclass(frozen=True)
class PipelineGeometry:
    """The numbers of a pipeline that its users compute with.

    `voice` holds the numbers of the pipeline's reply shape, picked by its graph's reply path (see
    reply/registry.py; None: replies are text only). The encoder's numbers are None in a pipeline
    that does not hear through one, and `asr_partial_every_s` (how much new speech a partial
    transcript waits for; None: finals only) in one without an ASR stage.
    """

    graph: StageGraph
    max_position: int
    is_windowed: bool  # the thinker keeps a bounded window: its context has no maximum length
    thinker_sampling: SamplingParams
    duplex: DuplexConfig
    voice: VoiceGeometry | None = None
    encoder_chunk_frames: int | None = None
    encoder_samples_per_frame: int | None = None
    asr_partial_every_s: float | None = None

    @classmethod
    def of(cls, config: PipelineConfig) -> PipelineGeometry:
        numbers = {}
        if config.asr is not None:
            numbers.update(asr_partial_every_s=config.asr.model.partial_every_s)
        if config.encoder is not None:
            encoder = config.encoder.model
            numbers.update(encoder_chunk_frames=encoder.chunk_frames,
                           encoder_samples_per_frame=encoder.samples_per_frame)
        return cls(config.graph, config.thinker.model.max_position, config.thinker.window is not None,
                   config.thinker_sampling, config.duplex, voice_of(config), **numbers)

    @property
    def encodes(self) -> bool:
        """The user's audio reaches the thinker as embeddings, through an encoder."""
        return StageKind.ENCODER in self.graph.input_path

    @property
    def transcribes(self) -> bool:
        """The user's speech reaches the thinker as text, through an ASR stage."""
        return StageKind.ASR in self.graph.input_path


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
