"""The asyncio side of the pipeline: sessions, turns and routing between stage engines."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from orchestrator.chat_template import ChatTemplate
from orchestrator.config import PipelineConfig
from orchestrator.placement import LocalPlacement, Placement, StageHandle
from orchestrator.session_context import SessionContext
from orchestrator.turn import Turn, TurnRequest
from stages.commands import AbortRequest, AddRequest, AppendInput, Command
from stages.engine import StageStatus
from stages.models.tokenizer import TextTokenizer
from stages.plan import StageOutput
from stages.requests import ThinkerRequest, TurnInput


class OutputHandler(Protocol):
    def on_output(self, kind: str, output: StageOutput) -> None: ...


class Orchestrator:
    """Owns the stage engines (through a placement) and every session's routing.

    All methods run on the event loop thread. Engine outputs hop onto the loop and
    go to the handler that owns the request id (a Turn, or a SessionContext for the
    resident thinker request); outputs of requests nobody owns any more are dropped.
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
        self.sessions: dict[str, SessionContext] = {}
        self._owners: dict[str, OutputHandler] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        talker = config.talker.model
        self.frames_per_token = talker.frames_per_token
        self.talker_bos_id = talker.bos_id
        self.output_sample_rate = config.vocoder.model.sample_rate
        self.vocoder_left_context = config.vocoder.model.left_context_frames

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.stages = await asyncio.to_thread(self.placement.start, self.config.stages, self._from_engine, self.clock)

    async def stop(self) -> None:
        for session_id in list(self.sessions):
            self.close_session(session_id)
        await asyncio.to_thread(self.placement.stop)

    def _from_engine(self, kind: str, outputs: list[StageOutput]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._route, kind, outputs)

    def _route(self, kind: str, outputs: list[StageOutput]) -> None:
        for output in outputs:
            handler = self._owners.get(output.request_id)
            if handler is not None:
                handler.on_output(kind, output)

    def submit(self, kind: str, command: Command) -> None:
        self.stages[kind].submit(command)

    def own(self, request_id: str, handler: OutputHandler) -> None:
        self._owners[request_id] = handler

    def disown(self, request_id: str) -> None:
        self._owners.pop(request_id, None)

    def open_session(self, session_id: str, instructions: str = "") -> SessionContext:
        if session_id in self.sessions:
            raise ValueError(f"session {session_id!r} is already open")
        session = SessionContext(session_id)
        thinker = self.config.thinker.model
        stop_ids = frozenset({self.tokenizer.im_end_id, self.tokenizer.endoftext_id})
        request = ThinkerRequest(session.thinker_id, self.clock(), stop_ids, thinker.max_position)
        self.sessions[session_id] = session
        self.own(session.thinker_id, session)
        self.submit("thinker", AddRequest(request))
        if instructions:
            self.submit("thinker", AppendInput(session.thinker_id, TurnInput(self.template.system(instructions))))
        return session

    def start_turn(self, session_id: str, request: TurnRequest) -> Turn:
        session = self._session(session_id)
        if session.active_turn is not None:
            raise ValueError(f"session {session_id!r} already has an active turn")
        turn = Turn(f"{session_id}/turn{session.num_turns}", session, request, self)
        session.turn_started(turn)
        turn.start()
        return turn

    def cancel_turn(self, session_id: str) -> bool:
        turn = self._session(session_id).active_turn
        if turn is not None:
            turn.cancel()
        return turn is not None

    def close_session(self, session_id: str) -> None:
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
