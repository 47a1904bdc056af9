"""Where ProcessPlacement's stage processes come from: forked from a forkserver here, or Ray actors
(orchestrator/ray_launcher.py)."""

from __future__ import annotations

import multiprocessing
from abc import ABC, abstractmethod
from typing import Protocol

from orchestrator.interpreter_process import spawn_in_interpreter
from orchestrator.shared_slots import SharedSlots
from orchestrator.stage_process import StageProcessArgs, serve_stage
from orchestrator.wire import Channel
from stages.stage_spec import StageSpec


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
    """A StageWorker over a child process (a multiprocessing.Process, or an InterpreterProcess)."""

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
    """Stage processes forked from a forkserver that imported torch and the stages once, or, for a stage
    whose spec names another interpreter (the vLLM backend's venv), run by that interpreter
    (interpreter_process); the stages share one SharedDevice board (named shared memory, a slot each,
    which any process on the machine attaches to), as they compute on one CPU."""

    def __init__(self) -> None:
        self._args: dict[str, StageProcessArgs] = {}
        self._context = None
        self._slots: SharedSlots | None = None

    def prepare(self, specs, torch_threads, log_level):
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["orchestrator.stage_process"])
        self._slots = SharedSlots.create(len(specs))
        self._args = {spec.name: StageProcessArgs(spec, ((self._slots, slot),), torch_threads, log_level)
                      for slot, spec in enumerate(specs)}

    def spawn(self, name):
        args = self._args[name]
        if args.spec.interpreter is not None:
            process, channel = spawn_in_interpreter(args.spec.interpreter, args)
            return ForkedStage(process), channel
        parent_end, child_end = self._context.Pipe()
        process = self._context.Process(target=serve_stage, args=(args, child_end),
                                        name=f"liveserve-{name}", daemon=True)
        process.start()
        child_end.close()
        return ForkedStage(process), Channel(parent_end)

    def close(self) -> None:
        if self._slots is not None:
            self._slots.close()
