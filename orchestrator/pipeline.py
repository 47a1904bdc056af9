"""What a turn, a user input or a duplex stream needs of the pipeline: a bus and its frozen geometry."""

from __future__ import annotations

import math
from dataclasses import dataclass

from orchestrator.chat_template import ChatTemplate
from orchestrator.config import DuplexConfig, PipelineConfig
from orchestrator.events import TurnUsage, UnheardWork
from orchestrator.stage_bus import StageBus
from orchestrator.stage_graph import StageGraph
from stages.config import SamplingParams
from stages.models.tokenizer import TextTokenizer


@dataclass(frozen=True)
class PipelineGeometry:
    """The numbers of a pipeline that its users compute with, and how heard audio maps to work.

    In a pipeline that speaks (`graph.speaks`), a reply's text tokens become `frames_per_token`
    codec frames each (`frame_ms` of audio at `sample_rate`, `samples_per_frame` samples); a token
    or frame counts as heard once its playback had started (frame k starts at k * frame_ms). The
    speech numbers are None in a pipeline that does not speak, the encoder's in one that does not hear.
    """

    graph: StageGraph
    max_position: int
    is_windowed: bool  # the thinker keeps a bounded window: its context has no maximum length
    thinker_sampling: SamplingParams
    duplex: DuplexConfig
    talker_sampling: SamplingParams | None = None
    frame_ms: float | None = None
    frames_per_token: int | None = None
    samples_per_frame: int | None = None
    sample_rate: int | None = None
    talker_bos_id: int | None = None
    vocoder_left_context: int | None = None
    encoder_chunk_frames: int | None = None
    encoder_samples_per_frame: int | None = None

    @classmethod
    def of(cls, config: PipelineConfig) -> PipelineGeometry:
        numbers = {}
        if config.graph.speaks:
            vocoder = config.vocoder.model
            numbers.update(frame_ms=1000.0 * vocoder.samples_per_frame / vocoder.sample_rate,
                           frames_per_token=config.talker.model.frames_per_token,
                           samples_per_frame=vocoder.samples_per_frame, sample_rate=vocoder.sample_rate,
                           talker_bos_id=config.talker.model.bos_id, vocoder_left_context=vocoder.left_context_frames)
        if config.graph.hears:
            encoder = config.encoder.model
            numbers.update(encoder_chunk_frames=encoder.chunk_frames,
                           encoder_samples_per_frame=encoder.samples_per_frame)
        return cls(config.graph, config.thinker.model.max_position, config.thinker.window is not None,
                   config.thinker_sampling, config.duplex, config.talker_sampling, **numbers)

    def frames_started(self, heard_ms: float) -> int:
        """Codec frames of a reply whose playback had started by `heard_ms`."""
        return math.ceil(heard_ms / self.frame_ms)

    def heard_tokens(self, num_spoken: int, heard_ms: float) -> int:
        """Of `num_spoken` spoken tokens, those whose audio had started playing by `heard_ms`."""
        return min(num_spoken, -(-self.frames_started(heard_ms) // self.frames_per_token))

    def unheard(self, usage: TurnUsage, spoken: list[int], heard_ms: float) -> UnheardWork:
        """The work in `usage` beyond the first `heard_ms` ms of its audio (see UnheardWork).

        `spoken` holds the positions, among the reply's generated text tokens, of those
        that became audio, in order. Pure: the same arguments give the same figure.
        """
        heard, started = self.heard_tokens(len(spoken), heard_ms), self.frames_started(heard_ms)
        kept = spoken[heard] if heard < len(spoken) else usage.text_tokens
        return UnheardWork(heard_ms, usage.text_tokens - kept, max(0, usage.codec_frames - started),
                           max(0, usage.vocoder_frames - started))


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
