"""Where stage engines run: threads of this process here, processes of their own in process_placement,
several replicas of a stage through either in replicated_placement."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Protocol

from stages.commands import Command
from stages.engine import StageStatus
from stages.factory import build_engine
from stages.interaction import InteractionView
from stages.plan import StageOutput
from stages.shared_device import SharedDevice
from stages.stage_spec import StageSpec

OutputSink = Callable[[str, list[StageOutput]], None]


class StageHandle(Protocol):
    """A running stage as the orchestrator sees it: `down_reason` is None while it serves, else why it
    does not (commands sent then fail at once, with that reason)."""

    down_reason: str | None

    def submit(self, command: Command) -> None: ...

    def submit_all(self, commands: Sequence[Command]) -> None:
        """Apply `commands` in order, all before the engine's next step."""

    def status(self) -> StageStatus: ...


class Placement(ABC):
    """Starts one engine per stage spec and stops them.

    Contract: `start` returns a handle per stage spec, by its name; `submit` and `submit_all` are
    thread-safe and never block on model work; outputs reach `sink(kind, outputs)` on an engine
    thread, in the order each engine produced them. `stop` ends every engine.
    """

    @abstractmethod
    def start(self, specs: tuple[StageSpec, ...], sink: OutputSink, clock: Callable[[], float],
              view: InteractionView | None = None) -> dict[str, StageHandle]:
        """Build and start the engines; their schedulers read playback telemetry from `view`."""

    @abstractmethod
    def stop(self) -> None:
        """Stop every engine started here."""


class LocalPlacement(Placement):
    """Each stage engine runs its loop on its own thread in this process; as they compute on
    one device, they share one `SharedDevice` board."""

    def __init__(self) -> None:
        self._engines = []

    def start(self, specs, sink, clock, view=None):
        handles, device = {}, SharedDevice()
        for spec in specs:
            engine = build_engine(spec, lambda outputs, kind=spec.kind: sink(kind, outputs), clock, view, device)
            engine.start()
            self._engines.append(engine)
            handles[spec.name] = engine
        return handles

    def stop(self) -> None:
        for engine in self._engines:
            engine.stop()
        self._engines.clear()
