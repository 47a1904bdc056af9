"""One response: the thinker's generation along the graph's reply path, and its one teardown path."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from orchestrator.datapath.reply_hop import ReplyHop
from orchestrator.datapath.request_id import RequestId
from orchestrator.interaction.playback_board import NOT_STARTED, reply_states
from orchestrator.session.context import ContextSegment, SessionContext
from orchestrator.session.events import AudioDelta, TextDelta, TurnDone, TurnEvent, TurnRequest, TurnUsage, UnheardWork
from orchestrator.session.spoken_text import SpokenText
from stages.commands import AppendInput
from stages.config import SamplingParams
from stages.interaction import PlaybackState
from stages.kinds import Payload, StageKind
from stages.models.tokenizer import IncrementalDetokenizer
from stages.plan import StageOutput
from stages.requests import SpeechSegment, TalkerRequest, ThinkerStep, TTSRequest, TurnInput, VocoderRequest

if TYPE_CHECKING:
    from orchestrator.pipeline import Pipeline

STATUS_BY_REASON = {"stop": "completed", "length": "incomplete"}


class Turn:
    """Generates one assistant reply into the session's context and streams it out.

    Waits for earlier context edits (user items) and holds its place in the session's edit order
    while the thinker generates. A reply that speaks (the request asks it and the graph has a reply
    path) goes along the graph's reply path, one ReplyHop per edge: the hidden states of its spoken
    tokens to the talker, its codec frames to the vocoder, the vocoder's audio out; or its text,
    detokenized as it comes, to a TTS stage, whose segments' audio goes out. Events arrive in
    order on `events`; exactly one TurnDone ends them. `cancel(heard_ms)` aborts the reply in every
    stage and cuts the assistant segment to the tokens whose audio was heard (`voice` maps heard
    audio to tokens); `unheard(heard_ms)` measures the work generated beyond that point.
    """

    def __init__(self, turn_id: str, item_id: str, session: SessionContext, request: TurnRequest, pipeline: Pipeline):
        self.turn_id, self.item_id, self.session, self.request = turn_id, item_id, session, request
        self.pipeline, self.bus, self.geometry = pipeline, pipeline.bus, pipeline.geometry
        self.events: asyncio.Queue[TurnEvent] = asyncio.Queue()
        self.usage = TurnUsage()
        self.status: str | None = None
        self.finish_reason: str | None = None
        self.segment: ContextSegment | None = None
        self._spoken: list[int] = []  # positions among the generated tokens of those that became audio; never cut
        self._generating = asyncio.get_running_loop().create_future()
        self._detok = IncrementalDetokenizer(pipeline.tokenizer)
        self.speaks = request.speak and self.geometry.graph.speaks
        path = self.geometry.graph.reply_path if self.speaks else ()
        self.ids = {edge.target: RequestId(session.session_id, edge.target, session.num_turns) for edge in path}
        self.hops: dict[StageKind, ReplyHop] = {}  # by the kind they feed, once the reply starts
        self.spoken_text = SpokenText(self.geometry.sample_rate) if StageKind.TTS in self.ids else None
        self.voice = self.spoken_text or self.geometry
        self._playback = (False, 0.0)  # (started, clock time the delivered audio runs out)
        self._previous_edit, self._edit_done = session.reserve_edit()

    @property
    def is_done(self) -> bool:
        return self.status is not None

    @property
    def is_generating(self) -> bool:
        """True while the thinker generates this reply (the context may not be edited)."""
        return self.segment is not None and not self._generating.done()

    async def run(self) -> None:
        try:
            failure = await asyncio.shield(self._previous_edit) if self._previous_edit is not None else None
            if failure is not None and not self.is_done:  # the user input this turn answers never arrived
                self._finish("failed", error=f"the user's input could not enter the context: {failure}")
            if not self.is_done:
                self._start()
                await self._generating
        finally:
            self._edit_done.set_result(None)

    def _start(self) -> None:
        session, geometry, now = self.session, self.geometry, self.bus.clock()
        prefix = self.pipeline.template.assistant_prefix(not session.segments, session.needs_close)
        segment = ContextSegment(self.item_id, list(prefix), is_closed=False, voice=self.voice if self.speaks else None)
        session.revive()
        try:
            session.append_segment(segment)
        except ValueError as exc:
            self._finish("failed", error=str(exc))
            return
        self.segment = segment
        for edge in geometry.graph.reply_path if self.speaks else ():
            hop = self.hops[edge.target] = ReplyHop(edge, self._reply_request(edge.target, now), self.bus)
            hop.start(self)
        self.usage.input_tokens = session.num_tokens
        self.bus.submit(StageKind.THINKER, AppendInput(session.thinker_id,
                                                       TurnInput(prefix, [], self._thinker_sampling(), self.turn_id)))

    def _reply_request(self, kind: StageKind, now: float):
        geometry, request_id = self.geometry, self.ids[kind]
        if kind is StageKind.TALKER:
            return TalkerRequest(request_id, now, geometry.frames_per_token, self._talker_sampling(),
                                 geometry.talker_bos_id)
        if kind is StageKind.TTS:
            return TTSRequest(request_id, now, *geometry.tts_segment_words)
        return VocoderRequest(request_id, now, geometry.vocoder_left_context)

    def _after(self, kind: StageKind) -> ReplyHop | None:
        """The hop fed by stage `kind` (None: `kind` is the last; the reply's audio comes out of it)."""
        return next((hop for hop in self.hops.values() if hop.edge.source == kind), None)

    def on_output(self, kind: str, output: StageOutput) -> None:
        if self.is_done:
            return
        if output.error is not None:
            self._finish("failed", error=f"{kind} stage: {output.error}")
        elif kind == StageKind.THINKER:
            self._on_thinker(output.payload)
        else:
            self._on_reply_stage(kind, output)
        self._publish_playback()

    def on_playback(self, started: bool, drained_at: float) -> None:
        """The user's playback of this reply: started, and when the delivered audio runs out."""
        self._playback = (started, drained_at)
        self._publish_playback()

    def _publish_playback(self) -> None:
        """Tell the stages how far ahead of the user's playback each of this reply's requests is."""
        if self.is_done or not self.hops:
            return
        if self.spoken_text is not None:  # how long the text the TTS stage holds will play is not known yet
            state = PlaybackState(*self._playback)
            self.bus.board.publish(self.session.thinker_id, state)
            self.bus.board.publish(self.ids[StageKind.TTS], state)
            return
        u, to_vocoder = self.usage, self.hops[StageKind.VOCODER].stream
        queued = max(0, u.codec_frames - to_vocoder.num_buffered - u.vocoder_frames)
        unvoiced = max(0, len(self._spoken) * self.geometry.frames_per_token - u.codec_frames)
        states = reply_states(*self._playback, self.geometry.frame_ms, queued, to_vocoder.whole_chunks(unvoiced))
        request_ids = (self.session.thinker_id, self.ids[StageKind.TALKER], self.ids[StageKind.VOCODER])
        for request_id, state in zip(request_ids, states):
            self.bus.board.publish(request_id, state)

    def _on_thinker(self, step: ThinkerStep | None) -> None:
        if step is None or step.tag != self.turn_id:
            return
        self.usage.text_tokens += 1
        self.segment.token_ids.append(step.token_id)
        text = self._detok.push(step.token_id)
        if text:
            self._emit(TextDelta(text))
        if self.hops and not self.pipeline.tokenizer.is_special(step.token_id):
            self.segment.spoken.append(len(self.segment.token_ids) - 1)
            self._spoken.append(self.usage.text_tokens - 1)
            self._voice(step, text)
        if step.finish_reason is not None:
            self._on_generation_end(step)

    def _voice(self, step: ThinkerStep, text: str) -> None:
        """A spoken token on to the first stage of the reply path: its hidden state, or its text."""
        if self.spoken_text is None:
            self._after(StageKind.THINKER).push([step.hidden])
            return
        self.spoken_text.add_token(text)
        if text:
            self._after(StageKind.THINKER).push([text])

    def _on_generation_end(self, step: ThinkerStep) -> None:
        self.finish_reason = step.finish_reason
        self.segment.is_closed = step.token_id == self.pipeline.tokenizer.im_end_id
        self._release_context()
        if not self.hops:
            self._finish(STATUS_BY_REASON[step.finish_reason])
            return
        self._after(StageKind.THINKER).close()

    def _on_reply_stage(self, kind: StageKind, output: StageOutput) -> None:
        """An output of a stage on the reply path: on to the next hop, or out as audio from the last."""
        after = self._after(kind)
        if after is None:
            self._on_audio(output)
            return
        if output.payload is not None:
            self.usage.codec_frames += after.edge.carries == Payload.CODEC_FRAMES
            after.push([output.payload])
        if output.is_finished:
            self.bus.disown(output.request_id)
            after.close()

    def _on_audio(self, output: StageOutput) -> None:
        audio = output.payload
        if isinstance(audio, SpeechSegment):
            self.spoken_text.add_segment(audio.start, audio.stop, len(audio.pcm))
            audio = audio.pcm
        if audio is not None and len(audio):
            pcm = audio.numpy()
            self.usage.audio_samples += len(pcm)
            self.usage.vocoder_frames += len(pcm) // self.geometry.samples_per_frame
            self._emit(AudioDelta(pcm, self.geometry.sample_rate))
        if output.is_finished:
            self._finish(STATUS_BY_REASON.get(self.finish_reason, "completed"))

    def cancel(self, heard_ms: float | None = None) -> None:
        """Stop the reply; keep in context what was heard (everything routed so far if None)."""
        if not self.is_done:
            self._finish("cancelled", heard_ms=heard_ms)

    def unheard(self, heard_ms: float) -> UnheardWork:
        """Work generated so far beyond the first `heard_ms` ms of this reply's audio.

        Usable while generating (the figure so far) and after the turn ended; later
        context cuts of the reply's item do not change it.
        """
        return self.geometry.unheard(self.usage, self._spoken, heard_ms, self.voice)

    def _cut_context(self, heard_ms: float | None) -> None:
        """End generation and make the thinker context match the (possibly shortened) segment."""
        segment = self.segment
        keep = len(segment.token_ids) if heard_ms is None else segment.keep_for_heard(
            self.voice.heard_tokens(len(segment.spoken), heard_ms))
        if keep < len(segment.token_ids) or not self._generating.done():
            segment.cut(keep)
            self.session.edited(segment)

    def _finish(self, status: str, error: str | None = None, heard_ms: float | None = None) -> None:
        self.status = status
        if status in ("cancelled", "failed"):
            for hop in self.hops.values():
                hop.abort()
            if self.segment is not None:
                self._cut_context(heard_ms)
            if status == "cancelled" and heard_ms is not None:
                self.usage.unheard = self.unheard(heard_ms)
        for request_id in self.ids.values():
            self.bus.disown(request_id)
        self.bus.board.publish(self.session.thinker_id, NOT_STARTED)
        self._release_context()
        self.session.turn_ended(self)
        self._emit(TurnDone(status, self.usage, error, self.finish_reason))

    def _release_context(self) -> None:
        if not self._generating.done():
            self._generating.set_result(None)
            self.session.next_use.on_generation_end(self.bus.clock())
            self.session.publish_next_use()

    def _emit(self, event: TurnEvent) -> None:
        self.events.put_nowait(event)

    def _thinker_sampling(self) -> SamplingParams:
        base, r = self.geometry.thinker_sampling, self.request
        overrides = {"ignore_eos": r.ignore_eos or base.ignore_eos, "seed": base.seed + self.session.num_turns}
        if r.max_tokens is not None:
            overrides["max_tokens"] = r.max_tokens
        if r.temperature is not None:
            overrides["temperature"] = r.temperature
        return replace(base, **overrides)

    def _talker_sampling(self) -> SamplingParams:
        base = self.geometry.talker_sampling
        return replace(base, seed=base.seed + self.session.num_turns)
