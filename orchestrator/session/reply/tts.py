"""The voice agent's reply: thinker text -> TTS stage -> PCM segments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from orchestrator.datapath.stage_bus import StageBus
from orchestrator.session.events import TurnUsage
from orchestrator.session.reply.base import SessionRequests, Voice, VoiceGeometry
from orchestrator.session.reply.voiced import VoicedReply
from orchestrator.session.spoken_text import SpokenText
from stages.interaction import PlaybackState
from stages.kinds import StageKind
from stages.models.tts_piper import SAMPLE_RATE as TTS_SAMPLE_RATE
from stages.requests import SpeechSegment, ThinkerStep, TTSRequest
from stages.requests.base import StageRequest

if TYPE_CHECKING:
    from orchestrator.config import PipelineConfig

TTS_FRAME_SAMPLES = 1920  # a TTS reply's audio is counted in 80 ms frames, as a vocoder's


@dataclass(frozen=True)
class TTSVoice(VoiceGeometry):
    """A reply's text is spoken in segments of `first_segment_words` words at most, then of at most
    `max_segment_words` (see TTSRequest); what was heard maps to its words (see SpokenText)."""

    first_segment_words: int
    max_segment_words: int

    @classmethod
    def of(cls, config: PipelineConfig) -> TTSVoice:
        model = config.tts.model
        return cls(config.graph.reply_path, TTS_SAMPLE_RATE, TTS_FRAME_SAMPLES,
                   1000.0 * TTS_FRAME_SAMPLES / TTS_SAMPLE_RATE, model.first_segment_words, model.max_segment_words)

    def reply(self, session_id: str, turn_index: int, bus: StageBus, usage: TurnUsage,
              session: SessionRequests | None = None) -> TTSReply:
        return TTSReply(self, session_id, turn_index, bus, usage)


class TTSReply(VoicedReply):
    """A spoken token sends its text to the TTS stage; each segment that comes back is heard as its
    words (`spoken_text`)."""

    geometry: TTSVoice

    def __init__(self, geometry: TTSVoice, session_id: str, turn_index: int, bus: StageBus, usage: TurnUsage) -> None:
        super().__init__(geometry, session_id, turn_index, bus, usage)
        self.spoken_text = SpokenText(geometry.sample_rate)

    def _requests(self, now: float, num_turns: int) -> dict[StageKind, StageRequest]:
        voice = self.geometry
        return {StageKind.TTS: TTSRequest(self.ids[StageKind.TTS], now, voice.first_segment_words,
                                          voice.max_segment_words, sample_rate=voice.sample_rate)}

    def _send(self, step: ThinkerStep, text: str) -> None:
        self.spoken_text.add_token(text)
        if text:
            self.first_hop.push([text])

    def _pcm(self, payload: Any) -> torch.Tensor | None:
        if not isinstance(payload, SpeechSegment):
            return payload
        self.spoken_text.add_segment(payload.start, payload.stop, len(payload.pcm))
        return payload.pcm

    def publish_playback(self, thinker_id: str, started: bool, drained_at: float,
                         delivered_ms: float | None) -> None:
        """Playback only: how long the text the TTS stage holds will play is not known yet. The TTS's state
        counts the audio delivered, so that the stage adds the segments it spoke since, which this state
        reaches it after (a segment is seconds of audio: without them, a reply that just got its first
        would look as if it had none)."""
        self.bus.board.publish(thinker_id, PlaybackState(started, drained_at))
        self.bus.board.publish(self.ids[StageKind.TTS], PlaybackState(started, drained_at, delivered_ms=delivered_ms))

    @property
    def voice(self) -> Voice:
        return self.spoken_text
