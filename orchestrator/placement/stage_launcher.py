"""Where ProcessPlacement's stage processes come from: forked from a forkserver here, or Ray actors
(orchestrator/placement/ray_launcher.py)."""

from __future__ import annotations

import multiprocessing
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Protocol

from orchestrator.placement.device_boards import SharedBoards
from orchestrator.placement.interpreter_process import spawn_in_interpreter
from orchestrator.placement.stage_process import StageProcessArgs, serve_stage
from orchestrator.placement.wire import Channel
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
    new process for the stage `name`, which sees only its own GPUs, and returns it with the connected Channel,
    whose first message is ("devices", what CUDA_VISIBLE_DEVICES says there), then ("status", ...) or
    ("failed", exception); it is called again for a stage whose process died. `close`
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
    (interpreter_process). Each sees the GPUs `gpus` gives it by name (none if not named: it computes on
    the CPU). Each device (the CPU, each GPU) has a SharedDevice board (named shared memory, a slot for every
    stage computing there, which any process on the machine attaches to), on which its stages yield to
    each other; a stage on several GPUs is on the board of each."""

    def __init__(self, gpus: Mapping[str, tuple[int, ...]] | None = None) -> None:
        self.gpus = dict(gpus or {})
        self.stage_args: dict[str, StageProcessArgs] = {}  # what each stage's process is started with
        self._context = None
        self._boards = SharedBoards()

    def prepare(self, specs, torch_threads, log_level):
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload(["orchestrator.placement.stage_process"])
        gpus = {spec.name: self.gpus.get(spec.name, ()) for spec in specs}
        boards = self._boards.seat({name: devices or ("cpu",) for name, devices in gpus.items()})
        self.stage_args = {spec.name: StageProcessArgs(spec, boards[spec.name], torch_threads, log_level,
                                                       gpus[spec.name]) for spec in specs}

    def spawn(self, name):
        args = self.stage_args[name]
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
        self._boards.close()
