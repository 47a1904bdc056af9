"""What a turn, a user input or a duplex stream needs of the pipeline: a bus and its frozen geometry."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from orchestrator.config import DuplexConfig, PipelineConfig
from orchestrator.datapath.stage_bus import StageBus
from orchestrator.datapath.stage_graph import StageGraph
from orchestrator.session.chat_template import ChatTemplate
from orchestrator.session.events import TurnUsage, UnheardWork
from stages.config import SamplingParams
from stages.kinds import StageKind
from stages.models.tokenizer import TextTokenizer
from stages.models.tts_piper import SAMPLE_RATE as TTS_SAMPLE_RATE

TTS_FRAME_SAMPLES = 1920  # a TTS reply's audio is counted in 80 ms frames, as a vocoder's


class Voice(Protocol):
    """How a reply's audio maps back to its spoken tokens (a PipelineGeometry through a talker, a
    SpokenText through a TTS stage)."""

    def heard_tokens(self, num_spoken: int, heard_ms: float) -> int:
        """Of the first `num_spoken` spoken tokens, those heard once `heard_ms` of the audio played."""


@dataclass(frozen=True)
class PipelineGeometry:
    """The numbers of a pipeline that its users compute with, and how heard audio maps to work.

    In a pipeline that speaks (`graph.speaks`), reply audio comes at `sample_rate` and is counted in
    frames of `frame_ms` (`samples_per_frame` samples). Through a talker, a reply's text tokens become
    `frames_per_token` codec frames each; a token or frame counts as heard once its playback had
    started (frame k starts at k * frame_ms). Through a TTS stage, its text is spoken in segments of
    `tts_segment_words` (first, later) words at most (see SpokenText for what was heard). The speech
    numbers are None in a pipeline that does not speak, the encoder's in one that does not hear, and
    `asr_partial_every_s` (how much new speech a partial transcript waits for; None: finals only) in
    one without an ASR stage.
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
    tts_segment_words: tuple[int, int] | None = None
    asr_partial_every_s: float | None = None

    @classmethod
    def of(cls, config: PipelineConfig) -> PipelineGeometry:
        numbers = {}
        if config.tts is not None:
            voice = config.tts.model
            numbers.update(frame_ms=1000.0 * TTS_FRAME_SAMPLES / TTS_SAMPLE_RATE, samples_per_frame=TTS_FRAME_SAMPLES,
                           sample_rate=TTS_SAMPLE_RATE,
                           tts_segment_words=(voice.first_segment_words, voice.max_segment_words))
        if config.asr is not None:
            numbers.update(asr_partial_every_s=config.asr.model.partial_every_s)
        if config.talker is not None:
            vocoder = config.vocoder.model
            numbers.update(frame_ms=1000.0 * vocoder.samples_per_frame / vocoder.sample_rate,
                           frames_per_token=config.talker.model.frames_per_token,
                           samples_per_frame=vocoder.samples_per_frame, sample_rate=vocoder.sample_rate,
                           talker_bos_id=config.talker.model.bos_id, vocoder_left_context=vocoder.left_context_frames)
        if config.encoder is not None:
            encoder = config.encoder.model
            numbers.update(encoder_chunk_frames=encoder.chunk_frames,
                           encoder_samples_per_frame=encoder.samples_per_frame)
        return cls(config.graph, config.thinker.model.max_position, config.thinker.window is not None,
                   config.thinker_sampling, config.duplex, config.talker_sampling, **numbers)

    def frames_started(self, heard_ms: float) -> int:
        """Codec frames of a reply whose playback had started by `heard_ms`."""
        return math.ceil(heard_ms / self.frame_ms)

    @property
    def transcribes(self) -> bool:
        """The user's speech reaches the thinker as text, through an ASR stage."""
        return StageKind.ASR in self.graph.input_path

    def heard_tokens(self, num_spoken: int, heard_ms: float) -> int:
        """Of `num_spoken` spoken tokens, those whose audio had started playing by `heard_ms` (through a talker)."""
        return min(num_spoken, -(-self.frames_started(heard_ms) // self.frames_per_token))

    def unheard(self, usage: TurnUsage, spoken: list[int], heard_ms: float, voice: Voice | None = None) -> UnheardWork:
        """The work in `usage` beyond the first `heard_ms` ms of its audio (see UnheardWork).

        `spoken` holds the positions, among the reply's generated text tokens, of those
        that became audio, in order; `voice` says how many of them were heard (None: this
        geometry, through a talker). Pure: the same arguments give the same figure.
        """
        heard = (voice or self).heard_tokens(len(spoken), heard_ms)
        started = self.frames_started(heard_ms)
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
