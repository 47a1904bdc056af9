"""Qwen3-Omni's reply: the conversation's rows and each token's embedding -> talker (+ code predictor) ->
codec frames of every codebook -> code2wav -> PCM."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from orchestrator.datapath.stage_bus import StageBus
from orchestrator.session.events import TurnUsage
from orchestrator.session.reply.base import VoiceGeometry
from orchestrator.session.reply.talker_vocoder import TalkerVocoderReply
from stages.commands import AppendInput
from stages.config import SamplingParams
from stages.kinds import StageKind
from stages.models.qwen3_omni.code2wav import LEFT_CONTEXT_FRAMES, SAMPLE_RATE
from stages.models.qwen3_omni.config import default_speaker
from stages.requests import ThinkerStep, VocoderRequest
from stages.requests.base import StageRequest
from stages.requests.qwen3_talker import Qwen3TalkerRequest, TalkerCodecIds
from stages.requests.talker_context import TalkerContextRule

if TYPE_CHECKING:
    from orchestrator.config import PipelineConfig


@dataclass(frozen=True)
class Qwen3OmniVoice(VoiceGeometry):
    """The talker reads the conversation (the generation's first step carries its rows) and every
    generated token's embedding, special ones too, as the reference does (see Qwen3TalkerRequest); the
    talker's frame k comes from the reply's token k, so a token counts as heard once its frame had started
    playing. code2wav decodes each chunk of frames with up to `left_context` frames before it."""

    codec_ids: TalkerCodecIds
    talker_sampling: SamplingParams
    left_context: int
    context_rule: TalkerContextRule
    frames_per_token = 1  # what the shared talker -> vocoder playback reads (a class constant, not a field)

    @classmethod
    def of(cls, config: PipelineConfig) -> Qwen3OmniVoice:
        model = config.talker.model
        samples = model.code2wav.total_upsample
        tokens, talker = model.tokens, model.talker
        codec_ids = TalkerCodecIds(talker.codec_eos_token_id, talker.codec_nothink_id, talker.codec_think_bos_id,
                                   talker.codec_think_eos_id, talker.codec_pad_id, talker.codec_bos_id,
                                   talker.speaker_id[default_speaker(talker.speaker_id)])
        return cls(config.graph.reply_path, SAMPLE_RATE, samples, 1000.0 * samples / SAMPLE_RATE, codec_ids,
                   config.talker_sampling, LEFT_CONTEXT_FRAMES,
                   TalkerContextRule(tokens.im_start_token_id, tokens.user_token_id, tokens.assistant_token_id))

    def reply(self, session_id: str, turn_index: int, bus: StageBus, usage: TurnUsage) -> Qwen3OmniReply:
        return Qwen3OmniReply(self, session_id, turn_index, bus, usage)

    @property
    def ms_per_token(self) -> float:
        return self.frame_ms

    @property
    def talker_rule(self) -> TalkerContextRule:
        return self.context_rule

    def heard_tokens(self, num_spoken: int, heard_ms: float) -> int:
        return min(num_spoken, self.frames_started(heard_ms))


class Qwen3OmniReply(TalkerVocoderReply):
    """The first token sends the talker its prompt rows, then every token its row; the talker's frames go
    on to code2wav (the path's playback as TalkerVocoderReply publishes it, a frame a token)."""

    geometry: Qwen3OmniVoice
    voices_special_tokens: ClassVar[bool] = True

    def _requests(self, now: float, num_turns: int) -> dict[StageKind, StageRequest]:
        voice = self.geometry
        sampling = replace(voice.talker_sampling, seed=voice.talker_sampling.seed + num_turns)
        return {StageKind.TALKER: Qwen3TalkerRequest(self.ids[StageKind.TALKER], now, sampling, voice.codec_ids),
                StageKind.VOCODER: VocoderRequest(self.ids[StageKind.VOCODER], now, voice.left_context)}

    def _send(self, step: ThinkerStep, text: str) -> None:
        if step.talker_prompt is not None:
            self.bus.submit(StageKind.TALKER, AppendInput(self.ids[StageKind.TALKER], step.talker_prompt))
        self.first_hop.push([step.hidden])
