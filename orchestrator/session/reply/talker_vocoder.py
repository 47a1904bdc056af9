"""tiny-omni's reply: thinker hidden states -> talker -> codec frames -> vocoder -> PCM."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from orchestrator.datapath.stage_bus import StageBus
from orchestrator.interaction.playback_board import reply_states
from orchestrator.session.events import TurnUsage
from orchestrator.session.reply.base import SessionRequests, Voice, VoiceGeometry
from orchestrator.session.reply.voiced import VoicedReply
from stages.config import SamplingParams
from stages.kinds import StageKind
from stages.requests import TalkerRequest, ThinkerStep, VocoderRequest
from stages.requests.base import StageRequest

if TYPE_CHECKING:
    from orchestrator.config import PipelineConfig


@dataclass(frozen=True)
class TalkerVocoderVoice(VoiceGeometry):
    """Each spoken text token becomes `frames_per_token` codec frames (the talker starts each reply at
    `talker_bos_id` and samples with `talker_sampling`); the vocoder decodes each chunk of frames with
    up to `vocoder_left_context` frames before it. A token counts as heard once its first frame had
    started playing."""

    frames_per_token: int
    talker_bos_id: int
    vocoder_left_context: int
    talker_sampling: SamplingParams

    @classmethod
    def of(cls, config: PipelineConfig) -> TalkerVocoderVoice:
        talker, vocoder = config.talker.model, config.vocoder.model
        return cls(config.graph.reply_path, vocoder.sample_rate, vocoder.samples_per_frame,
                   1000.0 * vocoder.samples_per_frame / vocoder.sample_rate, talker.frames_per_token, talker.bos_id,
                   vocoder.left_context_frames, config.talker_sampling)

    def reply(self, session_id: str, turn_index: int, bus: StageBus, usage: TurnUsage,
              session: SessionRequests | None = None) -> TalkerVocoderReply:
        return TalkerVocoderReply(self, session_id, turn_index, bus, usage)

    @property
    def ms_per_token(self) -> float:
        return self.frames_per_token * self.frame_ms

    def heard_tokens(self, num_spoken: int, heard_ms: float) -> int:
        """Of `num_spoken` spoken tokens, those whose audio had started playing by `heard_ms`."""
        return min(num_spoken, -(-self.frames_started(heard_ms) // self.frames_per_token))


class TalkerVocoderReply(VoicedReply):
    """A spoken token sends its hidden state to the talker; the talker's frames go to the vocoder."""

    geometry: TalkerVocoderVoice

    def _requests(self, now: float, num_turns: int) -> dict[StageKind, StageRequest]:
        voice = self.geometry
        sampling = replace(voice.talker_sampling, seed=voice.talker_sampling.seed + num_turns)
        return {StageKind.TALKER: TalkerRequest(self.ids[StageKind.TALKER], now, voice.frames_per_token, sampling,
                                                voice.talker_bos_id),
                StageKind.VOCODER: VocoderRequest(self.ids[StageKind.VOCODER], now, voice.vocoder_left_context,
                                                  voice.frame_ms)}

    def _send(self, step: ThinkerStep, text: str) -> None:
        self.first_hop.push([step.hidden])

    def publish_playback(self, thinker_id: str, started: bool, drained_at: float,
                         delivered_ms: float | None) -> None:
        """The thinker's, the talker's and the vocoder's lead over playback (see reply_states)."""
        usage, to_vocoder = self.usage, self.hops[StageKind.VOCODER].stream
        queued = max(0, usage.codec_frames - to_vocoder.num_buffered - usage.vocoder_frames)
        unvoiced = max(0, len(self.spoken) * self.geometry.frames_per_token - usage.codec_frames)
        states = reply_states(started, drained_at, self.geometry.frame_ms, queued, to_vocoder.whole_chunks(unvoiced),
                              delivered_ms)
        for request_id, state in zip((thinker_id, self.ids[StageKind.TALKER], self.ids[StageKind.VOCODER]), states):
            self.bus.board.publish(request_id, state)

    @property
    def voice(self) -> Voice:
        return self.geometry
