"""One user turn through encoder -> thinker -> talker -> vocoder, and its one teardown path."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

from orchestrator.chunk_stream import ChunkStream
from orchestrator.events import AudioDelta, TextDelta, TurnDone, TurnEvent, TurnUsage
from stages.commands import AbortRequest, AddRequest, AppendInput, StopGeneration
from stages.models.tokenizer import IncrementalDetokenizer
from stages.plan import StageOutput
from stages.requests import EncoderRequest, TalkerRequest, ThinkerStep, TurnInput, VocoderRequest

if TYPE_CHECKING:
    from orchestrator.orchestrator import Orchestrator
    from orchestrator.session_context import SessionContext

STATUS_BY_REASON = {"stop": "completed", "length": "incomplete"}


@dataclass(frozen=True)
class TurnRequest:
    """What the user said (16 kHz float audio and/or text) and how to answer."""

    audio: np.ndarray | None = None
    text: str = ""
    speak: bool = True
    max_tokens: int | None = None
    temperature: float | None = None
    ignore_eos: bool = False


class Turn:
    """Drives one turn: submits work to each stage, routes outputs downstream, emits events.

    Events arrive in order on `events`; exactly one TurnDone ends them. `cancel`
    aborts the turn's requests in every stage and stops the thinker's generation; the
    session's resident thinker context is kept.
    """

    def __init__(self, turn_id: str, session: SessionContext, request: TurnRequest, orch: Orchestrator) -> None:
        self.turn_id = turn_id
        self.session = session
        self.request = request
        self.orch = orch
        self.events: asyncio.Queue[TurnEvent] = asyncio.Queue()
        self.usage = TurnUsage()
        self.status: str | None = None
        self.finish_reason: str | None = None
        self._embeddings: list[torch.Tensor] = []
        self._detok = IncrementalDetokenizer(orch.tokenizer)
        self._to_talker: ChunkStream[torch.Tensor] = ChunkStream(orch.config.thinker_to_talker)
        self._to_vocoder: ChunkStream[int] = ChunkStream(orch.config.talker_to_vocoder)
        self.ids = {kind: f"{turn_id}/{kind}" for kind in ("encoder", "talker", "vocoder")}

    @property
    def is_done(self) -> bool:
        return self.status is not None

    def start(self) -> None:
        if self.request.speak:
            self._add("talker", TalkerRequest(self.ids["talker"], self.orch.clock(), self.orch.frames_per_token,
                                              self._talker_sampling(), self.orch.talker_bos_id))
            self._add("vocoder", VocoderRequest(self.ids["vocoder"], self.orch.clock(), self.orch.vocoder_left_context))
        if self.request.audio is not None and len(self.request.audio):
            enc = self.orch.config.encoder.model
            self._add("encoder", EncoderRequest(self.ids["encoder"], self.orch.clock(), enc.chunk_frames, enc.samples_per_frame))
            self.orch.submit("encoder", AppendInput(self.ids["encoder"], torch.from_numpy(self.request.audio), close=True))
        else:
            self._submit_to_thinker(None)

    def _add(self, kind: str, request) -> None:
        self.orch.own(request.request_id, self)
        self.orch.submit(kind, AddRequest(request))

    def on_output(self, kind: str, output: StageOutput) -> None:
        if self.is_done:
            return
        if output.error is not None:
            self._finish("failed", error=f"{kind} stage: {output.error}")
        elif kind == "encoder":
            self._on_encoder(output)
        elif kind == "thinker":
            self._on_thinker(output.payload)
        elif kind == "talker":
            self._on_talker(output)
        elif kind == "vocoder":
            self._on_vocoder(output)

    def _on_encoder(self, output: StageOutput) -> None:
        if output.payload is not None:
            self._embeddings.append(output.payload)
        if output.is_finished:
            self.orch.disown(output.request_id)
            self._submit_to_thinker(torch.cat(self._embeddings) if self._embeddings else None)

    def _submit_to_thinker(self, audio_embeddings: torch.Tensor | None) -> None:
        num_audio = 0 if audio_embeddings is None else len(audio_embeddings)
        ids, offset = self.orch.template.user_turn(self.request.text, num_audio, self.session.needs_close)
        embeds = [] if audio_embeddings is None else [(offset, audio_embeddings)]
        self.usage.input_tokens, self.usage.audio_input_frames = len(ids), num_audio
        self.session.needs_close = False
        turn = TurnInput(ids, embeds, self._thinker_sampling(), self.turn_id)
        self.orch.submit("thinker", AppendInput(self.session.thinker_id, turn))

    def _on_thinker(self, step: ThinkerStep | None) -> None:
        if step is None or step.turn_id != self.turn_id:
            return
        self.usage.text_tokens += 1
        text = self._detok.push(step.token_id)
        if text:
            self._emit(TextDelta(text))
        if self.request.speak and not self.orch.tokenizer.is_special(step.token_id):
            for chunk in self._to_talker.push([step.hidden]):
                self.orch.submit("talker", AppendInput(self.ids["talker"], torch.stack(chunk)))
        if step.finish_reason is not None:
            self._on_generation_end(step)

    def _on_generation_end(self, step: ThinkerStep) -> None:
        self.finish_reason = step.finish_reason
        self.session.needs_close = step.token_id != self.orch.tokenizer.im_end_id
        if not self.request.speak:
            self._finish(STATUS_BY_REASON[step.finish_reason])
            return
        rest = self._to_talker.close()
        self.orch.submit("talker", AppendInput(self.ids["talker"], torch.stack(rest) if rest else None, close=True))

    def _on_talker(self, output: StageOutput) -> None:
        if output.payload is not None:
            self.usage.codec_frames += 1
            for chunk in self._to_vocoder.push([output.payload]):
                self.orch.submit("vocoder", AppendInput(self.ids["vocoder"], chunk))
        if output.is_finished:
            self.orch.disown(output.request_id)
            self.orch.submit("vocoder", AppendInput(self.ids["vocoder"], self._to_vocoder.close() or None, close=True))

    def _on_vocoder(self, output: StageOutput) -> None:
        if output.payload is not None and len(output.payload):
            pcm = output.payload.numpy()
            self.usage.audio_samples += len(pcm)
            self._emit(AudioDelta(pcm, self.orch.output_sample_rate))
        if output.is_finished:
            self._finish(STATUS_BY_REASON.get(self.finish_reason, "completed"))

    def cancel(self) -> None:
        if not self.is_done:
            self._finish("cancelled")

    def _finish(self, status: str, error: str | None = None) -> None:
        self.status = status
        if status in ("cancelled", "failed"):
            for kind, request_id in self.ids.items():
                self.orch.submit(kind, AbortRequest(request_id))
            self.orch.submit("thinker", StopGeneration(self.session.thinker_id))
            self.session.needs_close = True
        for request_id in self.ids.values():
            self.orch.disown(request_id)
        self.session.turn_ended(self)
        self._emit(TurnDone(status, self.usage, error, self.finish_reason))

    def _emit(self, event: TurnEvent) -> None:
        self.events.put_nowait(event)

    def _thinker_sampling(self):
        base, r = self.orch.config.thinker_sampling, self.request
        overrides = {"ignore_eos": r.ignore_eos, "seed": base.seed + self.session.num_turns}
        if r.max_tokens is not None:
            overrides["max_tokens"] = r.max_tokens
        if r.temperature is not None:
            overrides["temperature"] = r.temperature
        return replace(base, **overrides)

    def _talker_sampling(self):
        base = self.orch.config.talker_sampling
        return replace(base, seed=base.seed + self.session.num_turns)
