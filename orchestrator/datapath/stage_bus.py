"""The stages as one bus: commands in, each engine output routed to the handler that owns its request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from orchestrator.interaction.playback_board import NOT_STARTED, PlaybackBoard
from orchestrator.placement.base import Placement, StageHandle
from stages.commands import Command
from stages.engine import StageStatus
from stages.plan import StageOutput
from stages.stage_spec import StageSpec


class OutputHandler(Protocol):
    def on_output(self, kind: str, output: StageOutput) -> None: ...


class StageBus:
    """Starts the stage engines through a placement, sends them commands and routes their outputs.

    Contract: every method runs on the event loop thread. Engine outputs hop onto the loop and go to
    the handler that `own`s the request id; outputs nobody owns are dropped. The commands submitted
    while outputs of one engine batch are routed, or inside `together()`, reach each stage as one
    batch, so its next step sees all of them. `board` is the stages' InteractionView: owning a request
    publishes it as waiting for first audio, disowning withdraws it.
    """

    def __init__(self, placement: Placement, clock: Callable[[], float]) -> None:
        self.placement = placement
        self.clock = clock
        self.board = PlaybackBoard(clock)
        self.stages: dict[str, StageHandle] = {}
        self._owners: dict[str, OutputHandler] = {}
        self._held: dict[str, list[Command]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self, specs: tuple[StageSpec, ...]) -> None:
        self._loop = asyncio.get_running_loop()
        self.stages = await asyncio.to_thread(self.placement.start, specs, self._from_engine, self.clock, self.board)

    async def stop(self) -> None:
        await asyncio.to_thread(self.placement.stop)

    def submit(self, kind: str, command: Command) -> None:
        if self._held is None:
            self.stages[kind].submit(command)
        else:
            self._held.setdefault(kind, []).append(command)

    @contextmanager
    def together(self) -> Iterator[None]:
        """Commands submitted inside reach each stage as one batch (nested: the outermost sends)."""
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

    def status(self) -> list[StageStatus]:
        """The status of every stage that serves (a stage that is down has none: its figures would be stale)."""
        return [handle.status() for handle in self.stages.values() if handle.down_reason is None]

    def down(self) -> dict[str, str]:
        """The stages that do not serve now, and why."""
        return {kind: handle.down_reason for kind, handle in self.stages.items() if handle.down_reason is not None}

    def _from_engine(self, kind: str, outputs: list[StageOutput]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(self._route, kind, outputs)

    def _route(self, kind: str, outputs: list[StageOutput]) -> None:
        with self.together():
            for output in outputs:
                handler = self._owners.get(output.request_id)
                if handler is not None:
                    handler.on_output(kind, output)
