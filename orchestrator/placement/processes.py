"""Stage engines in processes of their own, so that their Python runs in parallel.

In one process the engines' threads share one interpreter lock, which every torch
op releases and takes back: with three stages stepping at once, a talker step
that takes 3.1 ms alone took 5.6 ms beside one busy thread, and 3.0 ms beside a
busy process. Here each engine runs in a child process (forked from a server
process that has imported torch and the stages once), commands and playback
telemetry go down a pipe, outputs and status come back up it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable

from orchestrator.interaction.playback_board import PlaybackBoard
from orchestrator.placement.base import OutputSink, Placement, StageHandle
from orchestrator.placement.stage_handle import StageProcess
from orchestrator.placement.stage_launcher import ForkserverLauncher, StageLauncher, StageWorker
from orchestrator.placement.wire import Channel
from stages.commands import Command
from stages.interaction import InteractionView
from stages.stage_spec import StageSpec

log = logging.getLogger(__name__)
STOP_TIMEOUT_S = 5.0
BOARD_FLUSH_S = 0.02
MAX_RESTARTS = 3  # a stage dying more often than this within RESTART_WINDOW_S is given up on
RESTART_WINDOW_S = 60.0


class ProcessPlacement(Placement):
    """Each stage engine runs in a process of its own, started by `launcher` (a child process forked from
    a forkserver unless told otherwise); StageProcess handles stand in for them.

    The stages keep time with `time.monotonic` (one clock for every process on the
    machine), so `start` refuses any other clock. Playback telemetry is a copy of
    the orchestrator's PlaybackBoard in each process: the changes a process has not
    seen travel with its next command batch, or within BOARD_FLUSH_S. A stage process
    that dies fails the requests it held, with an error naming it, and is restarted
    (its model loaded again, the whole board sent to it); meanwhile its commands fail
    at once. A stage that dies MAX_RESTARTS times within RESTART_WINDOW_S is given up
    on: it stays down, logged as an error, and its commands fail saying so.
    """

    def __init__(self, torch_threads: int, launcher: StageLauncher | None = None) -> None:
        self.torch_threads = torch_threads
        self.launcher = launcher or ForkserverLauncher()
        self._handles: list[StageProcess] = []
        self._board: PlaybackBoard | None = None
        self._send_lock = threading.Lock()  # keeps board changes and commands in the order they happened
        self._stopped = threading.Event()
        self._flusher: threading.Thread | None = None
        self._restarts: dict[str, deque[float]] = defaultdict(deque)

    def start(self, specs: tuple[StageSpec, ...], sink: OutputSink, clock: Callable[[], float],
              view: InteractionView | None = None) -> dict[str, StageHandle]:
        if clock is not time.monotonic:
            raise ValueError("stage processes keep time with time.monotonic; use LocalPlacement for another clock")
        if view is not None and not isinstance(view, PlaybackBoard):
            raise TypeError(f"stage processes mirror a PlaybackBoard, not a {type(view).__name__}")
        self._board = view
        if view is not None:
            view.record_changes()
        handles = {}
        try:
            self.launcher.prepare(specs, self.torch_threads, logging.getLogger().getEffectiveLevel())
            for spec in specs:
                handle = StageProcess(spec, lambda outputs, kind=spec.kind: sink(kind, outputs), self, self._on_death)
                handle.attach(*self._spawn(spec.name))
                self._handles.append(handle)
                handles[spec.name] = handle
            for handle in self._handles:
                handle.wait_started()
                handle.mark_up()
        except BaseException:
            self.stop()
            raise
        self._flusher = threading.Thread(target=self._flush_periodically, name="board-flusher", daemon=True)
        self._flusher.start()
        return handles

    def _spawn(self, name: str) -> tuple[StageWorker, Channel]:
        return self.launcher.spawn(name)

    def _on_death(self, handle: StageProcess) -> None:
        if not self._stopped.is_set():
            threading.Thread(target=self._restart, args=(handle,), name=f"restart-{handle.name}", daemon=True).start()

    def _restart(self, handle: StageProcess) -> None:
        now, deaths = time.monotonic(), self._restarts[handle.name]
        while deaths and deaths[0] < now - RESTART_WINDOW_S:
            deaths.popleft()
        if len(deaths) >= MAX_RESTARTS:
            handle.give_up(f"given up after {MAX_RESTARTS} restarts within {RESTART_WINDOW_S:g} s")
            log.error("stage %s: died %d times within %g s; given up on, its work fails until the server restarts",
                      handle.name, MAX_RESTARTS + 1, RESTART_WINDOW_S)
            return
        deaths.append(now)
        handle.give_up(f"{handle.down_reason}; restarting")
        log.warning("stage %s: restarting it (%d of %d within %g s)", handle.name, len(deaths), MAX_RESTARTS,
                    RESTART_WINDOW_S)
        try:
            handle.attach(*self._spawn(handle.name))
            handle.wait_started()
        except Exception as exc:  # noqa: BLE001 - a stage that cannot start again stays down, loudly
            handle.give_up(f"could not be restarted: {exc}")
            log.exception("stage %s: could not be restarted", handle.name)
            return
        with self._send_lock:  # the new process sees the whole board before any command
            self._collect_board()
            handle.take_board_changes()
            handle.send_quietly(("board", self._board.snapshot() if self._board is not None else []))
            handle.mark_up()
        log.warning("stage %s: restarted", handle.name)

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
                    if (changes := handle.take_board_changes()) and handle.is_up:
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
        self.launcher.close()
