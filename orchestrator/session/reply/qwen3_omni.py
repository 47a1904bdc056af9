"""Qwen3-Omni's reply: the conversation's rows and each token's embedding -> talker (+ code predictor) ->
codec frames of every codebook -> code2wav -> PCM."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from orchestrator.datapath.request_id import RequestId
from orchestrator.datapath.stage_bus import StageBus
from orchestrator.session.events import AudioDelta, TurnUsage
from orchestrator.session.reply.base import SessionRequests, VoiceGeometry
from orchestrator.session.reply.talker_vocoder import TalkerVocoderReply
from stages.commands import AppendInput, StopGeneration
from stages.config import SamplingParams
from stages.kinds import StageKind
from stages.models.qwen3_omni.code2wav import LEFT_CONTEXT_FRAMES, SAMPLE_RATE
from stages.models.qwen3_omni.config import default_speaker
from stages.plan import StageOutput
from stages.requests import ThinkerStep, VocoderRequest
from stages.requests.base import StageRequest
from stages.requests.qwen3_talker import Qwen3TalkerRequest, TalkerCodecIds, TalkerFrame, TalkerTurn
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

    def reply(self, session_id: str, turn_index: int, bus: StageBus, usage: TurnUsage,
              session: SessionRequests | None = None) -> Qwen3OmniReply:
        if session is None:
            raise ValueError("a Qwen3-Omni reply keeps its talker in the session: give the session")
        return Qwen3OmniReply(self, session_id, turn_index, bus, usage, session.resident_talker())

    @property
    def ms_per_token(self) -> float:
        return self.frame_ms

    @property
    def talker_rule(self) -> TalkerContextRule:
        return self.context_rule

    def heard_tokens(self, num_spoken: int, heard_ms: float) -> int:
        return min(num_spoken, self.frames_started(heard_ms))


class Qwen3OmniReply(TalkerVocoderReply):
    """The talker is the session's resident request (`talker`: its id, and whether this reply adds it): the
    first token starts the reply there with the conversation's rows (a TalkerTurn), then every token sends
    its row; the talker's frames go on to code2wav (the path's playback as TalkerVocoderReply publishes it, a
    frame a token). When the talker's reply ends (or the turn is cut) the talker keeps only the
    conversation's user rows, ready for the next turn."""

    geometry: Qwen3OmniVoice
    voices_special_tokens: ClassVar[bool] = True
    resident_kinds: ClassVar[frozenset[StageKind]] = frozenset({StageKind.TALKER})

    def __init__(self, geometry: Qwen3OmniVoice, session_id: str, turn_index: int, bus: StageBus, usage: TurnUsage,
                 talker: tuple[RequestId, bool]) -> None:
        super().__init__(geometry, session_id, turn_index, bus, usage)
        (self.ids[StageKind.TALKER], self._adds_talker), self._users = talker, None
        self._sampling = geometry.talker_sampling

    def _requests(self, now: float, num_turns: int) -> dict[StageKind, StageRequest | RequestId]:
        voice, talker_id = self.geometry, self.ids[StageKind.TALKER]
        self._sampling = replace(voice.talker_sampling, seed=voice.talker_sampling.seed + num_turns)
        talker = Qwen3TalkerRequest(talker_id, now, voice.codec_ids) if self._adds_talker else talker_id
        return {StageKind.TALKER: talker,
                StageKind.VOCODER: VocoderRequest(self.ids[StageKind.VOCODER], now, voice.left_context,
                                                    voice.frame_ms)}

    def _send(self, step: ThinkerStep, text: str) -> None:
        if step.talker_prompt is not None:
            self._users = len(step.talker_prompt.user_rows)
            turn = TalkerTurn(step.talker_prompt, self._sampling, self._tag)
            self.bus.submit(StageKind.TALKER, AppendInput(self.ids[StageKind.TALKER], turn))
        self.first_hop.push([step.hidden])

    def end_text(self) -> bool:
        """The text is complete; a reply of one token feeds the talker nothing, so code2wav's input ends too."""
        super().end_text()
        if len(self.spoken) < 2:
            self._keep_user_rows()
            self.hops[StageKind.VOCODER].close()
        return True

    def on_output(self, kind: StageKind, output: StageOutput) -> AudioDelta | None:
        payload = output.payload
        if kind != StageKind.TALKER or output.error is not None:
            return super().on_output(kind, output)
        if payload is None or payload.tag != self._tag:  # a cut reply's last outputs
            return None
        if isinstance(payload, TalkerFrame):
            return super().on_output(kind, replace(output, payload=payload.codes))
        self._keep_user_rows()
        self.hops[StageKind.VOCODER].close()
        return None

    @property
    def _tag(self) -> str:
        """What this reply's talker outputs carry: its code2wav request's id, unique to the reply."""
        return self.ids[StageKind.VOCODER]

    def abort(self) -> None:
        super().abort()
        self._keep_user_rows()

    def _keep_user_rows(self) -> None:
        """The talker drops this reply's positions, keeping the conversation's user rows (if they came)."""
        if self._users is not None:
            self.bus.submit(StageKind.TALKER, StopGeneration(self.ids[StageKind.TALKER], self._users))
