"""The asyncio side of the pipeline: sessions, their context, turns and routing."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

import numpy as np

from orchestrator.chat_template import ChatTemplate
from orchestrator.config import PipelineConfig
from orchestrator.duplex import DuplexEvent, DuplexStream
from orchestrator.events import TurnUsage, UnheardWork
from orchestrator.placement import LocalPlacement, Placement, StageHandle
from orchestrator.next_use import NextUseEstimator
from orchestrator.playback_board import NOT_STARTED, PlaybackBoard
from orchestrator.session_context import ContextSegment, SessionContext
from orchestrator.turn import Turn, TurnRequest
from orchestrator.user_input import UserInput
from stages.commands import AbortRequest, AddRequest, AppendInput, Command, SpeechPaused, SpeechStarted, StopGeneration
from stages.engine import StageStatus
from stages.models.tokenizer import TextTokenizer
from stages.plan import StageOutput
from stages.requests import ThinkerRequest, TurnInput

SYSTEM_ITEM = "system"


class OutputHandler(Protocol):
    def on_output(self, kind: str, output: StageOutput) -> None: ...


class Orchestrator:
    """Owns the stage engines (through a placement), every session's context and routing.

    All methods run on the event loop thread. Engine outputs hop onto the loop and
    go to the handler that owns the request id; outputs nobody owns are dropped.
    A session's thinker context is the concatenation of its segments (one per
    conversation item); edits at the tail truncate the resident KV in place, edits
    further back rebuild the context (the thinker recomputes it).
    """

    def __init__(
        self, config: PipelineConfig, tokenizer: TextTokenizer | None = None,
        placement: Placement | None = None, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer or TextTokenizer.default()
        self.template = ChatTemplate(self.tokenizer)
        self.placement = placement or LocalPlacement()
        self.clock = clock
        self.stages: dict[str, StageHandle] = {}
        self.board = PlaybackBoard(clock)
        self.sessions: dict[str, SessionContext] = {}
        self.duplex: dict[str, DuplexStream] = {}
        self._owners: dict[str, OutputHandler] = {}
        self._held: dict[str, list[Command]] | None = None  # commands of one routing pass, per stage
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ticker: asyncio.Task | None = None
        vocoder = config.vocoder.model
        self.frames_per_token = config.talker.model.frames_per_token
        self.talker_bos_id = config.talker.model.bos_id
        self.output_sample_rate = vocoder.sample_rate
        self.samples_per_frame = vocoder.samples_per_frame
        self.frame_ms = 1000.0 * vocoder.samples_per_frame / vocoder.sample_rate
        self.vocoder_left_context = vocoder.left_context_frames

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.stages = await asyncio.to_thread(self.placement.start, self.config.stages, self._from_engine, self.clock,
                                                self.board)

    async def stop(self) -> None:
        for session_id in list(self.sessions):
            self.close_session(session_id)
        if self._ticker is not None:
            self._ticker.cancel()
        await asyncio.to_thread(self.placement.stop)

    def _from_engine(self, kind: str, outputs: list[StageOutput]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._route, kind, outputs)

    def _route(self, kind: str, outputs: list[StageOutput]) -> None:
        with self._together():
            for output in outputs:
                handler = self._owners.get(output.request_id)
                if handler is not None:
                    handler.on_output(kind, output)

    def submit(self, kind: str, command: Command) -> None:
        if self._held is None:
            self.stages[kind].submit(command)
        else:
            self._held.setdefault(kind, []).append(command)

    @contextmanager
    def _together(self) -> Iterator[None]:
        """Commands submitted inside reach each stage as one batch, so its next step sees all of
        them (a step started on the first would leave the rest for another)."""
        if self._held is not None:
            yield
            return
        self._held = {}
        try:
            yield
        finally:
            held, self._held = self._held, None
            for kind, commands in held.items():
                self.stages[kind].submit_all(commands)

    def own(self, request_id: str, handler: OutputHandler) -> None:
        """Route the request's outputs to `handler`; until told more, it waits for first audio."""
        self._owners[request_id] = handler
        self.board.publish(request_id, NOT_STARTED)

    def disown(self, request_id: str) -> None:
        self._owners.pop(request_id, None)
        self.board.withdraw(request_id)

    def note_playback(self, session_id: str, started: bool, drained_at: float) -> None:
        """The monitor's view of the session's current reply: playback started, and the clock
        time its delivered audio runs out. Ignored when no reply is in progress."""
        session = self.sessions.get(session_id)
        if session is None:
            return
        if started:
            session.next_use.on_playback(drained_at)
            self.publish_next_use(session)
        if session.active_turn is not None:
            session.active_turn.on_playback(started, drained_at)

    def note_speech_started(self, session_id: str) -> None:
        """The user started speaking: their next turn will need the context soon (protect and
        preload its KV). Ignored for an unknown session."""
        session = self.sessions.get(session_id)
        if session is None:
            return
        session.next_use.on_speech_started(self.clock())
        self.publish_next_use(session)
        self.submit("thinker", SpeechStarted(session.thinker_id, session.next_use.lead_s))

    def note_speech_paused(self, session_id: str, lead_s: float) -> None:
        """The user went quiet: unless they go on, their turn ends in `lead_s` (the thinker may preload
        the context now). Ignored for an unknown session."""
        session = self.sessions.get(session_id)
        if session is not None:
            self.submit("thinker", SpeechPaused(session.thinker_id, lead_s))

    def publish_next_use(self, session: SessionContext) -> None:
        """Tell the stages when the session's context is needed next (see NextUseEstimator)."""
        self.board.publish_next_use(session.thinker_id, session.next_use.hint(self.clock()))

    def open_session(self, session_id: str, instructions: str = "") -> SessionContext:
        if session_id in self.sessions:
            raise ValueError(f"session {session_id!r} is already open")
        session = SessionContext(session_id, NextUseEstimator(self.config.interaction))
        self.sessions[session_id] = session
        if instructions:
            session.segments.append(ContextSegment(SYSTEM_ITEM, self.template.system(instructions)))
        self._start_thinker(session)
        return session

    def _start_thinker(self, session: SessionContext) -> None:
        """A new resident thinker request holding the session's segments."""
        stop_ids = frozenset({self.tokenizer.im_end_id, self.tokenizer.endoftext_id})
        request = ThinkerRequest(session.thinker_id, self.clock(), stop_ids, self.config.thinker.model.max_position)
        self.own(session.thinker_id, session)
        self.submit("thinker", AddRequest(request))
        if session.segments:
            ids, embeds = [], []
            for segment in session.segments:
                embeds += [(len(ids) + offset, rows) for offset, rows in segment.embeds]
                ids += segment.token_ids
            self.submit("thinker", AppendInput(session.thinker_id, TurnInput(ids, embeds)))

    def add_user_item(self, session_id: str, item_id: str, audio: np.ndarray | None = None, text: str = "") -> asyncio.Task:
        """Append a user message (16 kHz audio and/or text); the task resolves once it is in context."""
        session = self._session(session_id)
        session.next_use.on_user_input(self.clock())
        self.publish_next_use(session)
        return asyncio.ensure_future(UserInput(self, session, item_id, audio, text).run())

    def start_turn(self, session_id: str, request: TurnRequest, item_id: str | None = None) -> Turn:
        """Generate a reply after every earlier item has entered the context."""
        session = self._session(session_id)
        if session.active_turn is not None:
            raise ValueError(f"session {session_id!r} already has an active turn")
        turn_id = f"{session_id}/turn{session.num_turns}"
        turn = Turn(turn_id, item_id or turn_id, session, request, self)
        session.turn_started(turn)
        session.next_use.on_turn_started(self.clock())
        self.publish_next_use(session)
        asyncio.ensure_future(turn.run())
        return turn

    def cancel_turn(self, session_id: str, heard_ms: float | None = None) -> bool:
        turn = self._session(session_id).active_turn
        if turn is not None:
            turn.cancel(heard_ms)
        return turn is not None

    def truncate_item(self, session_id: str, item_id: str, keep_tokens: int) -> None:
        """Cut an item's segment to its first `keep_tokens` tokens (never lengthens it)."""
        session = self._session(session_id)
        segment = session.segment(item_id)
        if segment is None:
            raise KeyError(f"item {item_id!r} is not in the context")
        if keep_tokens < len(segment.token_ids):
            del segment.token_ids[keep_tokens:]
            segment.spoken = [i for i in segment.spoken if i < keep_tokens]
            segment.is_closed = False
            self.context_edited(session, segment)

    def truncate_item_audio(self, session_id: str, item_id: str, heard_ms: float) -> None:
        """Cut an assistant item to the tokens whose audio had started playing by `heard_ms`."""
        segment = self._session(session_id).segment(item_id)
        if segment is None:
            raise KeyError(f"item {item_id!r} is not in the context")
        self.truncate_item(session_id, item_id, segment.keep_for_heard(self.heard_tokens(len(segment.spoken), heard_ms)))

    def frames_started(self, heard_ms: float) -> int:
        """Codec frames of a reply whose playback had started by `heard_ms` (frame k starts at k * frame_ms)."""
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

    def set_instructions(self, session_id: str, instructions: str) -> None:
        """Replace the session's system message (the context is rebuilt)."""
        session = self._session(session_id)
        session.segments = [s for s in session.segments if s.item_id != SYSTEM_ITEM]
        if instructions:
            session.segments.insert(0, ContextSegment(SYSTEM_ITEM, self.template.system(instructions)))
        self._rebuild(session)

    def delete_item(self, session_id: str, item_id: str) -> bool:
        session = self._session(session_id)
        segment = session.segment(item_id)
        if segment is None:
            return False
        session.segments.remove(segment)
        self._rebuild(session)
        return True

    def context_edited(self, session: SessionContext, segment: ContextSegment) -> None:
        """Bring the thinker's resident context in line with an edited segment."""
        if segment is session.segments[-1]:
            self.submit("thinker", StopGeneration(session.thinker_id, session.num_tokens))
        else:
            self._rebuild(session)

    def _rebuild(self, session: SessionContext) -> None:
        if session.active_turn is not None and session.active_turn.is_generating:
            raise ValueError("the conversation cannot be edited while a response is being generated")
        self.disown(session.thinker_id)
        self.submit("thinker", AbortRequest(session.thinker_id))
        session.next_thinker_id()
        self._start_thinker(session)

    def open_duplex(self, session_id: str, listener: Callable[[DuplexEvent], None]) -> DuplexStream:
        """Start the session's full-duplex stream (see DuplexStream); frames tick every `duplex.frame_ms`.

        The stream's context starts with the session's system message, if any.
        """
        session = self._session(session_id)
        if session_id in self.duplex:
            raise ValueError(f"session {session_id!r} is already streaming")
        prefix = [t for s in session.segments if s.item_id == SYSTEM_ITEM for t in s.token_ids]
        stream = self.duplex[session_id] = DuplexStream(self, session_id, listener, prefix)
        if self._ticker is None:
            self._ticker = asyncio.ensure_future(self._tick_duplex())
        return stream

    def close_duplex(self, session_id: str) -> None:
        stream = self.duplex.pop(session_id, None)
        if stream is not None:
            stream.close()

    async def _tick_duplex(self) -> None:
        """Every frame period, on the period's boundaries (late wake-ups skip, never drift), tick every stream."""
        period = self.config.duplex.frame_ms / 1000.0
        due = self.clock()
        while True:
            due += period
            now = self.clock()
            if due < now:
                due += period * math.ceil((now - due) / period)
            await asyncio.sleep(due - now)
            now = self.clock()
            with self._together():
                for stream in list(self.duplex.values()):
                    stream.tick(now)

    def close_session(self, session_id: str) -> None:
        self.close_duplex(session_id)
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        if session.active_turn is not None:
            session.active_turn.cancel()
        self.disown(session.thinker_id)
        self.submit("thinker", AbortRequest(session.thinker_id))

    def _session(self, session_id: str) -> SessionContext:
        if session_id not in self.sessions:
            raise KeyError(f"no open session {session_id!r}")
        return self.sessions[session_id]

    def status(self) -> list[StageStatus]:
        return [handle.status() for handle in self.stages.values()]

    async def wait_idle(self, timeout_s: float = 10.0) -> None:
        """Wait until every engine is idle and no output is in flight (for tests and benches)."""
        deadline = time.monotonic() + timeout_s
        quiet = 0
        while quiet < 3:
            if time.monotonic() > deadline:
                raise TimeoutError("stages did not go idle")
            await asyncio.sleep(0.01)
            quiet = quiet + 1 if all(s.is_idle for s in self.status()) else 0
