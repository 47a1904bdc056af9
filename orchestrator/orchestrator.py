"""The asyncio side of the pipeline: the stage bus, the duplex frame clock and the open sessions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from monitor import (
    SemanticTurnConfig,
    SemanticTurnDetector,
    SessionMonitor,
    SileroVAD,
    SmartTurn,
    TurnCompletion,
    TurnDetectionConfig,
    TurnDetector,
    VadBatcher,
    VoiceConfidence,
)
from orchestrator.config import PipelineConfig
from orchestrator.datapath.stage_bus import StageBus
from orchestrator.duplex.frame_ticker import FrameTicker
from orchestrator.duplex.hub import DuplexHub
from orchestrator.interaction.controller import InteractionController
from orchestrator.interaction.events import InteractionEvent
from orchestrator.interaction.next_use import NextUseEstimator
from orchestrator.pipeline import Pipeline, PipelineGeometry
from orchestrator.placement.base import LocalPlacement, Placement
from orchestrator.session.chat_template import ChatTemplate
from orchestrator.session.session import Session
from orchestrator.snapshot import PipelineSnapshot, take_snapshot
from stages.engine import StageStatus
from stages.factory import thinker_text
from stages.models.tokenizer import TextTokenizer


class Orchestrator:
    """Owns the stage bus (engines started through a placement), the duplex hub and the open sessions.

    All methods run on the event loop thread. Sessions, turns, user inputs and duplex streams get
    the pipeline's narrow port (`pipeline`), never the orchestrator. The tokenizer and the chat template's
    default system message are the thinker model's (`tokenizer` replaces the former). `sleep` is what the duplex
    frame clock waits with, `vad` makes each session's voice activity detector and `turn_model` the
    end-of-turn model of semantic_vad (tests pass a fake clock's sleep, a scripted VAD and model).
    """

    def __init__(
        self, config: PipelineConfig, tokenizer: TextTokenizer | None = None,
        placement: Placement | None = None, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, vad: Callable[[], VoiceConfidence] = SileroVAD,
        turn_model: Callable[[], TurnCompletion] = SmartTurn,
    ) -> None:
        self.config = config
        self.clock = clock
        self.vad, self.turn_model = vad, turn_model
        self.vad_batcher = VadBatcher()  # every session's VAD windows scored together
        model_tokenizer, default_instructions = thinker_text(config.thinker)
        tokenizer = tokenizer or model_tokenizer
        self.bus = StageBus(placement or LocalPlacement(), clock)
        template = ChatTemplate(tokenizer, default_instructions)
        self.pipeline = Pipeline(self.bus, PipelineGeometry.of(config), tokenizer, template)
        self.duplex = DuplexHub(self.pipeline, FrameTicker(config.duplex.frame_ms / 1000.0, clock, sleep))
        self.sessions: dict[str, Session] = {}
        self.interactions: dict[str, InteractionController] = {}

    @property
    def geometry(self) -> PipelineGeometry:
        return self.pipeline.geometry

    @property
    def board(self):
        return self.bus.board

    async def start(self) -> None:
        await self.bus.start(self.config.stages)

    async def stop(self) -> None:
        for session_id in list(self.sessions):
            self.close_session(session_id)
        self.duplex.stop()
        await self.bus.stop()

    def open_session(self, session_id: str, instructions: str = "") -> Session:
        """A new session whose context starts with `instructions` as its system message."""
        if session_id in self.sessions:
            raise ValueError(f"session {session_id!r} is already open")
        session = Session(session_id, self.pipeline, NextUseEstimator(self.config.interaction), self.duplex,
                          on_close=lambda: self._forget(session_id))
        self.sessions[session_id] = session
        session.start(instructions)
        return session

    def open_interaction(self, session_id: str, listener: Callable[[InteractionEvent], None],
                         instructions: str = "") -> InteractionController:
        """A new session behind its interaction controller (which tells `listener` what happens)."""
        session = self.open_session(session_id, instructions)
        monitor = SessionMonitor(self.make_detector(TurnDetectionConfig()), self.clock)
        controller = InteractionController(session, monitor, self.make_detector, listener, self.clock,
                                           self.vad_batcher, self.config.interaction.preemptive_reply)
        self.interactions[session_id] = controller
        return controller

    def make_detector(self, config: TurnDetectionConfig | SemanticTurnConfig) -> TurnDetector:
        """A detector for `config`, pausing speech after the deployment's `interaction.pause_ms` at most:
        semantic_vad's judges pauses with the end-of-turn model."""
        config = replace(config, max_pause_ms=self.config.interaction.pause_ms)
        if isinstance(config, SemanticTurnConfig):
            return SemanticTurnDetector(self.vad(), self.turn_model(), config)
        return TurnDetector(self.vad(), config)

    def close_session(self, session_id: str) -> None:
        session = self.sessions.get(session_id)
        if session is not None:
            session.close()

    def _forget(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)
        self.interactions.pop(session_id, None)

    def status(self) -> list[StageStatus]:
        return self.bus.status()

    def snapshot(self) -> PipelineSnapshot:
        """The sessions opened with an interaction controller and the serving stages, now (for a live view)."""
        return take_snapshot(self.config, list(self.interactions.values()), self.status(), self.board,
                             self.duplex.streams.keys(), self.clock())

    async def wait_idle(self, timeout_s: float = 10.0) -> None:
        """Wait until every engine is idle and no output is in flight (for tests and benches)."""
        deadline = time.monotonic() + timeout_s
        quiet = 0
        while quiet < 3:
            if time.monotonic() > deadline:
                raise TimeoutError("stages did not go idle")
            await asyncio.sleep(0.01)
            quiet = quiet + 1 if all(s.is_idle for s in self.status()) else 0
