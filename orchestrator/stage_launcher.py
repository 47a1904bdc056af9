"""Where ProcessPlacement's stage processes come from: forked from a forkserver here, or Ray actors
(orchestrator/ray_launcher.py)."""

from __future__ import annotations

import ctypes
import multiprocessing
from abc import ABC, abstractmethod
from typing import Protocol

from orchestrator.stage_process import StageProcessArgs, serve_stage
from orchestrator.wire import Channel
from stages.factory import StageSpec


class StageWorker(Protocol):
    """A running stage process as its handle sees it."""

    pid: int

    def join(self, timeout_s: float) -> None: ...

    def is_alive(self) -> bool: ...

    def terminate(self) -> None: ...

    def exit_reason(self) -> str:
        """Why it stopped serving, once its connection has closed without a stop (`its process exited ...`)."""


class StageLauncher(ABC):
    """Starts stage processes that serve stage_process's protocol over a Channel.

    Contract: `prepare` is called once, with every stage spec, before any `spawn`; `spawn(name)` starts a
    new process for the stage `name` and returns it with the connected Channel, whose first message is
    ("status", ...) or ("failed", exception); it is called again for a stage whose process died. `close`
    comes after every process has stopped, and releases what `prepare` took.
    """

    @abstractmethod
    def prepare(self, specs: tuple[StageSpec, ...], torch_threads: int, log_level: int) -> None: ...

    @abstractmethod
    def spawn(self, name: str) -> tuple[StageWorker, Channel]: ...

    def close(self) -> None:
        """Nothing to release unless a launcher says otherwise."""


class ForkedStage:
    """A StageWorker over a child process."""

    def __init__(self, process: multiprocessing.Process) -> None:
        self.process = process

    @property
    def pid(self) -> int:
        return self.process.pid

    def join(self, timeout_s: float) -> None:
        self.process.join(timeout_s)

    def is_alive(self) -> bool:
        return self.process.is_alive()

    def terminate(self) -> None:
        self.process.terminate()

    def exit_reason(self) -> str:
        self.process.join(1.0)
        return f"its process exited (exit code {self.process.exitcode})"


class ForkserverLauncher(StageLauncher):
    """Stage processes forked from a forkserver that imported torch and the stages once; the stages share
    one SharedDevice board (an array in shared memory, a slot each), as they compute on one CPU."""

    def __init__(self) -> None:
        self._args: dict[str, StageProcessArgs] = {}
        self._context = None

    def prepare(self, specs, torch_threads, log_level):
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["orchestrator.stage_process"])
        slots = self._context.RawArray(ctypes.c_bool, len(specs))
        self._args = {spec.name: StageProcessArgs(spec, slots, slot, torch_threads, log_level)
                      for slot, spec in enumerate(specs)}

    def spawn(self, name):
        parent_end, child_end = self._context.Pipe()
        process = self._context.Process(target=serve_stage, args=(self._args[name], child_end),
                                        name=f"liveserve-{name}", daemon=True)
        process.start()
        child_end.close()
        return ForkedStage(process), Channel(parent_end)
