"""The orchestrator's side of one stage process: commands down its pipe, outputs and status up, across restarts."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from orchestrator.interaction.playback_board import BoardChange
from orchestrator.placement.wire import Channel
from stages.commands import AbortRequest, AddRequest, Command
from stages.engine import StageStatus
from stages.plan import StageOutput
from stages.stage_spec import StageSpec

if TYPE_CHECKING:
    from orchestrator.placement.stage_launcher import StageWorker

log = logging.getLogger(__name__)
START_TIMEOUT_S = 120.0


class CommandSender(Protocol):
    """How a handle's commands reach its process (the ProcessPlacement, which orders them with board changes)."""

    def send_commands(self, handle: StageProcess, commands: list[Command]) -> None: ...


class StageProcess:
    """A StageHandle for one stage, whose engine runs in a child process that may be replaced.

    `attach` gives it a (new) process: a reader thread notes the GPUs it sees (`visible_devices`, its
    CUDA_VISIBLE_DEVICES: "" for none), hands the process's outputs to `emit` and keeps its latest
    status, which is idle only once the process has applied every batch sent to it. When the process
    dies (not stopped), every request it held fails with an error naming the stage, the placement is
    told (`on_death`) and, until `attach` brings a new process, the stage is down: `down_reason` says
    why, every command sent fails at once with it, and `is_up` is false.
    """

    def __init__(self, spec: StageSpec, emit: Callable[[list[StageOutput]], None], placement: CommandSender,
                 on_death: Callable[[StageProcess], None]) -> None:
        self.spec, self.name, self.emit, self.placement, self.on_death = spec, spec.name, emit, placement, on_death
        self.process: StageWorker | None = None
        self.channel: Channel | None = None
        self.num_sent = 0  # command batches sent to the current process
        self.board_changes: list[BoardChange] = []  # not sent yet (the placement's send lock guards it)
        self.down_reason: str | None = "not started"
        self.visible_devices: str | None = None  # as the attached process reported them
        self._latest: tuple[StageStatus | None, int] = (None, 0)  # status, and batches applied when taken
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._held: set[str] = set()  # request ids the process holds, to fail if it dies
        self._lock = threading.Lock()
        self._stopping = False
        self._reader: threading.Thread | None = None

    @property
    def is_up(self) -> bool:
        return self.down_reason is None

    def attach(self, process: StageWorker, channel: Channel) -> None:
        """Serve through `process` from now on (its first status marks it started)."""
        self.process, self.channel, self.num_sent, self.visible_devices = process, channel, 0, None
        self._started.clear()
        self._failure = None
        self._reader = threading.Thread(target=self._read, args=(channel,), name=f"from-{self.name}", daemon=True)
        self._reader.start()

    def wait_started(self) -> None:
        """Block until the attached process serves; its start-up error if it failed."""
        if not self._started.wait(START_TIMEOUT_S):
            raise TimeoutError(f"stage {self.name!r} did not start within {START_TIMEOUT_S:g} s")
        if self._failure is not None:
            raise self._failure

    def mark_up(self) -> None:
        """The attached process is started and has what it needs: commands go to it from now on."""
        self.down_reason = None

    def submit(self, command: Command) -> None:
        self.submit_all((command,))

    def submit_all(self, commands: Sequence[Command]) -> None:
        with self._lock:
            reason = self.down_reason
            if reason is None:
                self._track(commands)
                self.num_sent += 1
        if reason is not None:
            self.emit([self._down_output(c.request_id, reason) for c in commands if c.request_id])
            return
        try:
            self.placement.send_commands(self, list(commands))
        except OSError:  # the process just died: its reader fails what it held, these included
            pass

    def status(self) -> StageStatus:
        status, num_applied = self._latest
        return status if num_applied >= self.num_sent else replace(status, is_idle=False)

    def take_board_changes(self) -> list[BoardChange]:
        changes, self.board_changes = self.board_changes, []
        return changes

    def send_quietly(self, message: tuple) -> None:
        """Send, ignoring a process that is gone (its reader reports that)."""
        try:
            if self.channel is not None:
                self.channel.send(message)
        except OSError:
            pass

    def give_up(self, reason: str) -> None:
        """Stay down for good: every command fails with `reason`."""
        self.down_reason = reason

    def request_stop(self) -> None:
        self._stopping = True
        self.send_quietly(("stop",))

    def join(self, timeout_s: float) -> None:
        if self.process is None:
            return
        self.process.join(timeout_s)
        if self.process.is_alive():
            log.warning("stage %s did not stop within %g s; terminating it", self.name, timeout_s)
            self.process.terminate()
            self.process.join(timeout_s)
        self._reader.join()
        self.channel.close()

    def _track(self, commands: Sequence[Command]) -> None:
        for command in commands:
            if isinstance(command, AddRequest):
                self._held.add(command.request_id)
            elif isinstance(command, AbortRequest):
                self._held.discard(command.request_id)

    def _read(self, channel: Channel) -> None:
        while True:
            try:
                kind, *body = channel.recv()
            except (EOFError, OSError):
                self._on_exit()
                return
            if kind == "outputs":
                self._on_outputs(body[0])
            elif kind == "devices":
                self._on_devices(body[0])
            elif kind == "status":
                self._latest = tuple(body)
                self._started.set()
            else:
                self._failure = body[0]
                self._started.set()

    def _on_devices(self, visible: str) -> None:
        self.visible_devices = visible
        if visible:
            log.info("stage %s sees GPUs %s (CUDA_VISIBLE_DEVICES)", self.name, visible)

    def _on_outputs(self, outputs: list[StageOutput]) -> None:
        with self._lock:
            for output in outputs:
                if output.error is not None or output.is_finished:
                    self._held.discard(output.request_id)
        self.emit(outputs)

    def _on_exit(self) -> None:
        """The pipe closed: after a stop, or because the process died."""
        if self._stopping or self._failure is not None:
            self._started.set()
            return
        reason = self.process.exit_reason()
        log.error("stage %s: %s; its requests fail", self.name, reason)
        with self._lock:
            self.down_reason = reason
            held, self._held = sorted(self._held), set()
        if not self._started.is_set():
            self._failure = RuntimeError(f"stage {self.name!r} stopped while starting: {reason}")
            self._started.set()
            return
        if held:
            self.emit([self._down_output(request_id, reason) for request_id in held])
        self.on_death(self)

    def _down_output(self, request_id: str, reason: str) -> StageOutput:
        return StageOutput(request_id, error=f"stage {self.name} is down: {reason}")
