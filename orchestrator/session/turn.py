"""One response: the thinker's generation along the graph's reply path, and its one teardown path."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import TYPE_CHECKING

from orchestrator.datapath.request_id import RequestId
from orchestrator.interaction.playback_board import NOT_STARTED
from orchestrator.session.call_gate import CallGate
from orchestrator.session.context import ContextSegment, SessionContext
from orchestrator.session.events import TextDelta, TurnDone, TurnEvent, TurnRequest, TurnUsage, UnheardWork
from orchestrator.session.reply.registry import new_reply
from orchestrator.session.tools import BEGIN, ToolCall
from stages.commands import AppendInput
from stages.config import SamplingParams
from stages.kinds import StageKind
from stages.models.tokenizer import IncrementalDetokenizer
from stages.plan import StageOutput
from stages.requests import ThinkerStep, TurnInput

if TYPE_CHECKING:
    from orchestrator.interaction.interaction_state import InteractionState
    from orchestrator.pipeline import Pipeline

STATUS_BY_REASON = {"stop": "completed", "length": "incomplete"}


class Turn:
    """Generates one assistant reply into the session's context and streams it out.

    Waits for earlier context edits (user items) and holds its place in the session's edit order
    while the thinker generates. Its `reply` (the strategy of the pipeline's reply shape; a
    SilentReply unless the request asks to speak and the graph has a reply path) takes the spoken
    tokens along the reply path and brings their audio back. Events arrive in order on `events`;
    exactly one TurnDone ends them. `cancel(heard_ms)` aborts the reply in every stage and cuts the
    assistant segment to the tokens whose audio was heard (the reply maps heard audio to tokens);
    `unheard(heard_ms)` measures the work generated beyond that point.
    """

    def __init__(self, turn_id: str, item_id: str, session: SessionContext, request: TurnRequest, pipeline: Pipeline,
                 interaction: InteractionState):
        self.turn_id, self.item_id, self.session, self.request = turn_id, item_id, session, request
        self.interaction = interaction
        self.pipeline, self.bus, self.geometry = pipeline, pipeline.bus, pipeline.geometry
        self.events: asyncio.Queue[TurnEvent] = asyncio.Queue()
        self.usage = TurnUsage()
        self.status: str | None = None
        self.finish_reason: str | None = None
        self.segment: ContextSegment | None = None
        self.generated: list[int] = []
        self._generating = asyncio.get_running_loop().create_future()
        self._detok = IncrementalDetokenizer(pipeline.tokenizer)
        tools = request.tools
        self.reply = new_reply(self.geometry.voice, request.speak and not tools.forced, session.session_id,
                               session.num_turns, self.bus, self.usage, session)
        self._gate = CallGate(BEGIN, tools.forced) if tools.may_call else None
        self.tool_call: ToolCall | None = None
        self._previous_edit, self._edit_done = session.reserve_edit()

    @property
    def request_ids(self) -> dict[StageKind, RequestId]:
        """Every request of this reply in the stages, by kind: the context's thinker request and the reply path's."""
        return {**self.session.request_ids, **self.reply.ids}

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
        session, now = self.session, self.bus.clock()
        prefix = self.pipeline.template.assistant_prefix(not session.segments, session.needs_close)
        segment = ContextSegment(self.item_id, list(prefix), is_closed=False, voice=self.reply.voice)
        session.revive()
        try:
            session.append_segment(segment)
        except ValueError as exc:
            self._finish("failed", error=str(exc))
            return
        self.segment = segment
        self.reply.start(self, now, session.num_seeded_turns)
        self.usage.input_tokens = session.num_tokens
        session.submit(AppendInput(session.thinker_id, TurnInput(prefix, [], self._thinker_sampling(), self.turn_id,
                                                                 self.request.tools.constraint())))

    def on_output(self, kind: str, output: StageOutput) -> None:
        if self.is_done:
            return
        if output.error is not None:
            self._finish("failed", error=f"{kind} stage: {output.error}")
        elif kind in self.reply.ids:
            self._on_reply_stage(kind, output)
        else:
            self._on_thinker(output.payload)
        self.publish_playback()

    def publish_playback(self) -> None:
        """Tell the stages how far ahead of the user's playback (the interaction's `playback`) each of
        this reply's requests is; nothing before the reply started or after the turn ended."""
        if not self.is_done and self.segment is not None:
            self.reply.publish_playback(self.session.thinker_id, *self.interaction.playback)

    def _on_thinker(self, step: ThinkerStep | None) -> None:
        if step is None or step.tag != self.turn_id:
            return
        self.usage.text_tokens += 1
        self.generated.append(step.token_id)
        self.segment.token_ids.append(step.token_id)
        text = self._detok.push(step.token_id)
        position = self.usage.text_tokens - 1
        passed = [(position, step, text)] if self._gate is None else self._gate.push(position, step, text)
        if step.finish_reason is not None and self._gate is not None:
            passed += self._gate.end()
        for held in passed:
            self._pass_on(*held)
        if step.finish_reason is not None:
            self._on_generation_end(step)

    def _pass_on(self, position: int, step: ThinkerStep, text: str) -> None:
        """A token of a message reply: out as text, and to the voice (its index in the segment from `position`)."""
        if text:
            self._emit(TextDelta(text))
        if self.reply.speak(position, step, text, self.pipeline.tokenizer.is_special(step.token_id)):
            self.segment.spoken.append(len(self.segment.token_ids) - len(self.generated) + position)

    def _on_generation_end(self, step: ThinkerStep) -> None:
        self.finish_reason = step.finish_reason
        self.segment.is_closed = step.token_id == self.pipeline.tokenizer.im_end_id
        if self._gate is not None and self._gate.is_call:
            self.tool_call = self.request.tools.parse(self.pipeline.tokenizer.decode(self.generated))
        self._release_context()
        if not self.reply.end_text():
            self._finish(STATUS_BY_REASON[step.finish_reason])

    def _on_reply_stage(self, kind: StageKind, output: StageOutput) -> None:
        """An output of a stage on the reply path: on along the path, or out as audio from the last."""
        audio = self.reply.on_output(kind, output)
        if audio is not None:
            self._emit(audio)
        if self.reply.is_finished:
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
        return self.reply.unheard(heard_ms)

    def _cut_context(self, heard_ms: float | None) -> None:
        """End generation and make the thinker context match the (possibly shortened) segment."""
        segment = self.segment
        keep = len(segment.token_ids) if heard_ms is None else segment.keep_for_heard(
            self.reply.heard_tokens(len(segment.spoken), heard_ms))
        if self._gate is not None and self._gate.is_call:  # a call cut short leaves no trace
            keep = len(segment.token_ids) - len(self.generated)
        if keep < len(segment.token_ids) or not self._generating.done():
            segment.cut(keep)
            self.session.edited(segment)

    def _finish(self, status: str, error: str | None = None, heard_ms: float | None = None) -> None:
        self.status = status
        if status in ("cancelled", "failed"):
            self.reply.abort()
            if self.segment is not None:
                self._cut_context(heard_ms)
            if status == "cancelled" and heard_ms is not None:
                self.usage.unheard = self.unheard(heard_ms)
        for request_id in self.reply.ids.values():
            self.bus.disown(request_id)
        self.bus.board.publish(self.session.thinker_id, NOT_STARTED)
        self._release_context()
        self.session.turn_ended(self)
        self._emit(TurnDone(status, self.usage, error, self.finish_reason, tuple(self.generated), self.tool_call))

    def _release_context(self) -> None:
        if not self._generating.done():
            self._generating.set_result(None)
            self.interaction.on_generation_end()

    def _emit(self, event: TurnEvent) -> None:
        self.events.put_nowait(event)

    def _thinker_sampling(self) -> SamplingParams:
        base, r = self.geometry.thinker_sampling, self.request
        overrides = {"ignore_eos": r.ignore_eos or base.ignore_eos, "seed": base.seed + self.session.num_seeded_turns}
        if r.max_tokens is not None:
            overrides["max_tokens"] = r.max_tokens
        if r.temperature is not None:
            overrides["temperature"] = r.temperature
        return replace(base, **overrides)
