"""Stage engines in processes of their own, so that their Python runs in parallel.

In one process the engines' threads share one interpreter lock, which every torch
op releases and takes back: with three stages stepping at once, a talker step
that takes 3.1 ms alone took 5.6 ms beside one busy thread, and 3.0 ms beside a
busy process. Here each engine runs in a child process (forked from a server
process that has imported torch and the stages once), commands and playback
telemetry go down a pipe, outputs and status come back up it.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from orchestrator.placement import OutputSink, Placement, StageHandle
from orchestrator.playback_board import BoardChange, PlaybackBoard
from orchestrator.stage_process import StageProcessArgs, serve_stage
from orchestrator.wire import Channel
from stages.commands import AbortRequest, AddRequest, Command
from stages.engine import StageStatus
from stages.factory import StageSpec
from stages.interaction import InteractionView
from stages.plan import StageOutput

log = logging.getLogger(__name__)
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 5.0
BOARD_FLUSH_S = 0.02


class ProcessPlacement(Placement):
    """Each stage engine runs in a child process; the handles here stand in for them.

    The stages keep time with `time.monotonic` (one clock for every process on the
    machine), so `start` refuses any other clock. Playback telemetry is a copy of
    the orchestrator's PlaybackBoard in each process: the changes a process has not
    seen travel with its next command batch, or within BOARD_FLUSH_S. A stage process
    that dies fails the requests it held and every later command sent to it, with an
    error naming it.
    """

    def __init__(self, torch_threads: int) -> None:
        self.torch_threads = torch_threads
        self._handles: list[StageProcess] = []
        self._board: PlaybackBoard | None = None
        self._send_lock = threading.Lock()  # keeps board changes and commands in the order they happened
        self._stopped = threading.Event()
        self._flusher: threading.Thread | None = None

    def start(self, specs: tuple[StageSpec, ...], sink: OutputSink, clock: Callable[[], float],
              view: InteractionView | None = None) -> dict[str, StageHandle]:
        if clock is not time.monotonic:
            raise ValueError("stage processes keep time with time.monotonic; use LocalPlacement for another clock")
        if view is not None and not isinstance(view, PlaybackBoard):
            raise TypeError(f"stage processes mirror a PlaybackBoard, not a {type(view).__name__}")
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["orchestrator.stage_process"])
        slots = context.RawArray(ctypes.c_bool, len(specs))
        level = logging.getLogger().getEffectiveLevel()
        self._board = view
        if view is not None:
            view.record_changes()
        handles = {}
        try:
            for slot, spec in enumerate(specs):
                process, channel = self._spawn(context, StageProcessArgs(spec, slots, slot, self.torch_threads, level))
                handle = StageProcess(spec, process, channel, lambda outputs, kind=spec.kind: sink(kind, outputs), self)
                self._handles.append(handle)
                handles[spec.kind] = handle
            for handle in self._handles:
                handle.wait_started()
        except BaseException:
            self.stop()
            raise
        self._flusher = threading.Thread(target=self._flush_periodically, name="board-flusher", daemon=True)
        self._flusher.start()
        return handles

    @staticmethod
    def _spawn(context, args: StageProcessArgs) -> tuple[multiprocessing.Process, Channel]:
        parent_end, child_end = context.Pipe()
        process = context.Process(target=serve_stage, args=(args, child_end), name=f"liveserve-{args.spec.name}",
                                  daemon=True)
        process.start()
        child_end.close()
        return process, Channel(parent_end)

    def send_commands(self, handle: StageProcess, commands: list[Command]) -> None:
        """Send `commands` to one stage process with the board changes made before them."""
        with self._send_lock:
            self._collect_board()
            handle.channel.send(("commands", commands, handle.take_board_changes()))

    def _flush_periodically(self) -> None:
        while not self._stopped.wait(BOARD_FLUSH_S):
            with self._send_lock:
                self._collect_board()
                for handle in self._handles:
                    if changes := handle.take_board_changes():
                        handle.send_quietly(("board", changes))

    def _collect_board(self) -> None:
        changes = self._board.drain_changes() if self._board is not None else []
        for handle in self._handles:
            handle.board_changes.extend(changes)

    def stop(self) -> None:
        self._stopped.set()
        if self._flusher is not None:
            self._flusher.join()
        for handle in self._handles:
            handle.request_stop()
        for handle in self._handles:
            handle.join(STOP_TIMEOUT_S)
        self._handles.clear()


class StageProcess:
    """The orchestrator's handle on one stage process (a StageHandle).

    A reader thread hands the process's outputs to `emit` and keeps its latest status.
    The status is idle only once the process has applied every batch sent to it.
    """

    def __init__(self, spec: StageSpec, process: multiprocessing.Process, channel: Channel,
                 emit: Callable[[list[StageOutput]], None], placement: ProcessPlacement) -> None:
        self.name = spec.name
        self.process = process
        self.channel = channel
        self.emit = emit
        self.placement = placement
        self.num_sent = 0  # command batches sent
        self._latest: tuple[StageStatus | None, int] = (None, 0)  # status, and batches applied when taken
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._held: set[str] = set()  # request ids the process holds, to fail if it dies
        self.board_changes: list[BoardChange] = []  # not sent yet (the placement's send lock guards it)
        self._lock = threading.Lock()
        self._is_dead = False
        self._stopping = False
        self._reader = threading.Thread(target=self._read, name=f"from-{self.name}", daemon=True)
        self._reader.start()

    def wait_started(self) -> None:
        if not self._started.wait(START_TIMEOUT_S):
            raise TimeoutError(f"stage {self.name!r} did not start within {START_TIMEOUT_S:g} s")
        if self._failure is not None:
            raise self._failure

    def submit(self, command: Command) -> None:
        self.submit_all((command,))

    def submit_all(self, commands: Sequence[Command]) -> None:
        with self._lock:
            is_dead = self._is_dead
            if not is_dead:
                self._track(commands)
                self.num_sent += 1
        if is_dead:
            self.emit([self._death_output(c.request_id) for c in commands if c.request_id])
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
            self.channel.send(message)
        except OSError:
            pass

    def request_stop(self) -> None:
        self._stopping = True
        self.send_quietly(("stop",))

    def join(self, timeout_s: float) -> None:
        self.process.join(timeout_s)
        if self.process.is_alive():
            log.warning("stage %s did not stop within %g s; terminating it", self.name, timeout_s)
            self.process.terminate()
            self.process.join()
        self._reader.join()
        self.channel.close()

    def _track(self, commands: Sequence[Command]) -> None:
        for command in commands:
            if isinstance(command, AddRequest):
                self._held.add(command.request_id)
            elif isinstance(command, AbortRequest):
                self._held.discard(command.request_id)

    def _read(self) -> None:
        while True:
            try:
                kind, *body = self.channel.recv()
            except (EOFError, OSError):
                self._on_exit()
                return
            if kind == "outputs":
                self._on_outputs(body[0])
            elif kind == "status":
                self._latest = tuple(body)
                self._started.set()
            else:
                self._failure = body[0]
                self._started.set()

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
        self.process.join(1.0)
        log.error("stage %s: its process exited (exit code %s); its requests fail", self.name, self.process.exitcode)
        with self._lock:
            self._is_dead = True
            held, self._held = sorted(self._held), set()
        if not self._started.is_set():
            self._failure = RuntimeError(f"stage {self.name!r} exited while starting (exit code {self.process.exitcode})")
            self._started.set()
        if held:
            self.emit([self._death_output(request_id) for request_id in held])

    def _death_output(self, request_id: str) -> StageOutput:
        return StageOutput(request_id, error=f"stage {self.name} is down: its process exited "
                                             f"(exit code {self.process.exitcode})")
