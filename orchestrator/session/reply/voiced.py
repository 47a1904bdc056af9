"""The mechanism every spoken reply shares: one ReplyHop per edge of the reply path, audio out of the last."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch

from orchestrator.datapath.reply_hop import ReplyHop
from orchestrator.datapath.request_id import RequestId
from orchestrator.datapath.stage_bus import OutputHandler, StageBus
from orchestrator.session.events import AudioDelta, TurnUsage, UnheardWork
from orchestrator.session.reply.base import Reply, VoiceGeometry
from stages.kinds import Payload, StageKind
from stages.plan import StageOutput
from stages.requests import ThinkerStep
from stages.requests.base import StageRequest


class VoicedReply(Reply):
    """A reply spoken along `geometry.path`, each stage's output chunked on to the next (see ReplyHop).

    A shape says what is its own: `_requests` (each stage's request), `_send` (what a spoken token
    sends to the first stage; special tokens are spoken only if `voices_special_tokens`; `resident_kinds`:
    the stages whose request the session keeps across turns, given as its id when not new), `_pcm` (the
    audio in a payload of the last stage; the payload itself by default), `publish_playback` and `voice`
    (which `heard_tokens` asks). Codec frames are counted as they cross an edge, audio as it comes out
    (its vocoded frames of `samples_per_frame`).
    """

    voices_special_tokens: ClassVar[bool] = False
    resident_kinds: ClassVar[frozenset[StageKind]] = frozenset()  # stages whose request is the session's

    def __init__(self, geometry: VoiceGeometry, session_id: str, turn_index: int, bus: StageBus,
                 usage: TurnUsage) -> None:
        self.geometry, self.bus, self.usage = geometry, bus, usage
        self.ids = {edge.target: RequestId(session_id, edge.target, turn_index) for edge in geometry.path}
        self.hops: dict[StageKind, ReplyHop] = {}  # by the kind they feed, once the reply starts
        self.spoken: list[int] = []  # positions among the generated tokens of those that became audio; never cut
        self.is_finished = False

    @abstractmethod
    def _requests(self, now: float, num_turns: int) -> dict[StageKind, StageRequest | RequestId]:
        """The reply's request for each stage of the path (ids from `ids`; a resident one already added: its id)."""

    @abstractmethod
    def _send(self, step: ThinkerStep, text: str) -> None:
        """A spoken token on to the first stage of the path (see `first_hop`)."""

    def _pcm(self, payload: Any) -> torch.Tensor | None:
        """The audio in an output of the last stage."""
        return payload

    @property
    def first_hop(self) -> ReplyHop:
        """The hop fed by the thinker."""
        return self.hops[self.geometry.path[0].target]

    def start(self, owner: OutputHandler, now: float, num_turns: int) -> None:
        requests = self._requests(now, num_turns)
        for edge in self.geometry.path:
            hop = self.hops[edge.target] = ReplyHop(edge, requests[edge.target], self.bus,
                                                    resident=edge.target in self.resident_kinds)
            hop.start(owner)

    def speak(self, position: int, step: ThinkerStep, text: str, is_special: bool = False) -> bool:
        if is_special and not self.voices_special_tokens:
            return False
        self.spoken.append(position)
        self._send(step, text)
        return True

    def end_text(self) -> bool:
        self.first_hop.close()
        return True

    def on_output(self, kind: StageKind, output: StageOutput) -> AudioDelta | None:
        after = self._after(kind)
        if after is None:
            return self._on_audio(output)
        if output.payload is not None:
            self.usage.codec_frames += after.edge.carries == Payload.CODEC_FRAMES
            after.push([output.payload])
        if output.is_finished:
            self.bus.disown(output.request_id)
            after.close()
        return None

    def _after(self, kind: StageKind) -> ReplyHop | None:
        """The hop fed by stage `kind` (None: `kind` is the last; the reply's audio comes out of it)."""
        return next((hop for hop in self.hops.values() if hop.edge.source == kind), None)

    def _on_audio(self, output: StageOutput) -> AudioDelta | None:
        self.is_finished = output.is_finished
        audio = self._pcm(output.payload)
        if audio is None or not len(audio):
            return None
        pcm = audio.numpy()
        self.usage.audio_samples += len(pcm)
        self.usage.vocoder_frames += len(pcm) // self.geometry.samples_per_frame
        return AudioDelta(pcm, self.geometry.sample_rate)

    def heard_tokens(self, num_spoken: int, heard_ms: float) -> int:
        return self.voice.heard_tokens(num_spoken, heard_ms)

    def abort(self) -> None:
        for hop in self.hops.values():
            hop.abort()

    def unheard(self, heard_ms: float) -> UnheardWork:
        usage, spoken = self.usage, self.spoken
        heard = self.heard_tokens(len(spoken), heard_ms)
        started = self.geometry.frames_started(heard_ms)
        kept = spoken[heard] if heard < len(spoken) else usage.text_tokens
        return UnheardWork(heard_ms, usage.text_tokens - kept, max(0, usage.codec_frames - started),
                           max(0, usage.vocoder_frames - started))
