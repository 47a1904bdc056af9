"""The stage-process side of ProcessPlacement: one engine, fed and drained over a pipe.

Messages in: ("commands", [Command, ...], [BoardChange, ...]) (the board changes made
before the commands), ("board", [BoardChange, ...]), ("stop",).
Messages out: ("devices", its CUDA_VISIBLE_DEVICES) first; then ("failed", exception) once if the
engine cannot be built, else ("outputs", [StageOutput, ...]) after steps, interleaved with ("status",
StageStatus, batches applied) whenever the status has changed, checked every STATUS_PERIOD_S.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

import torch

from orchestrator.interaction.playback_board import PlaybackBoard
from orchestrator.placement.wire import Channel
from stages.engine import StageEngine
from stages.factory import build_engine
from stages.shared_device import Board, SharedDevice
from stages.stage_spec import StageSpec

STATUS_PERIOD_S = 0.02
PROCESS_PREFIX = "ls-"  # a stage process is named ls-<stage> in ps and /proc/<pid>/comm
PR_SET_NAME = 15
VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def name_process(name: str) -> None:
    """Name this process as the kernel shows it (Linux; 15 characters at most; elsewhere nothing)."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(PR_SET_NAME, ctypes.create_string_buffer(name.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass


@dataclass(frozen=True)
class StageProcessArgs:
    """What a stage process is started with: its spec, its slot on the board of each device it
    computes on, the process's torch threads and log level, and the GPUs it sees (none: no GPU)."""

    spec: StageSpec
    boards: tuple[Board, ...]
    torch_threads: int
    log_level: int
    gpus: tuple[int, ...] = ()

    @property
    def environment(self) -> dict[str, str]:
        """What the process's environment says before anything in it starts CUDA: its GPUs, or none (set
        empty, so that a stage on the CPU cannot take GPU 0 by accident)."""
        return {VISIBLE_DEVICES: ",".join(map(str, self.gpus))}


def serve_stage(args: StageProcessArgs, connection: Connection) -> None:
    """The process's target: build the engine, then serve the pipe until told to stop or it closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the parent stops us
    name_process(f"{PROCESS_PREFIX}{args.spec.name}")
    logging.basicConfig(level=args.log_level, format="%(levelname)s:%(name)s:%(message)s")
    run_stage(args, Channel(connection))


def run_stage(args: StageProcessArgs, channel: Channel) -> None:
    """See the stage's GPUs, build the engine and serve `channel` on this thread until told to stop or the
    channel closes. torch reads CUDA_VISIBLE_DEVICES when CUDA starts, at its first use, not at import: a
    forked process sets it here, before the engine is built (the forkserver imported torch and started no CUDA)."""
    os.environ.update(args.environment)
    channel.send(("devices", os.environ[VISIBLE_DEVICES]))
    torch.set_num_threads(args.torch_threads)
    board = PlaybackBoard(time.monotonic)

    def emit(outputs: list) -> None:
        try:
            channel.send(("outputs", outputs))
        except OSError:  # the orchestrator is gone: the receive loop ends this process
            pass

    try:
        engine = build_engine(args.spec, emit, time.monotonic, board, SharedDevice.spanning(args.boards))
    except Exception as exc:  # the parent raises it; a start-up error ends this process
        try:
            channel.send(("failed", exc))
        except Exception:  # noqa: BLE001 - an exception that does not pickle still gets its message across
            channel.send(("failed", RuntimeError(f"{type(exc).__name__}: {exc}")))
        return
    gc.collect()
    gc.freeze()  # as in the server: the collector walks what serving allocates, not the model
    StageServer(engine, channel, board).serve()


class StageServer:
    """Applies what the pipe brings to the engine on this (main) thread, while a status thread
    reports the engine's status each time it changes."""

    def __init__(self, engine: StageEngine, channel: Channel, board: PlaybackBoard) -> None:
        self.engine = engine
        self.channel = channel
        self.board = board
        self.num_batches = 0  # command batches submitted to the engine
        self._done = threading.Event()

    def serve(self) -> None:
        self.engine.start()
        reporter = threading.Thread(target=self._report, name=f"status-{self.engine.name}", daemon=True)
        reporter.start()
        try:
            self._receive()
        finally:
            self._done.set()
            reporter.join()
            self.engine.stop()

    def _receive(self) -> None:
        while True:
            try:
                kind, *body = self.channel.recv()
            except (EOFError, OSError):  # the orchestrator is gone
                return
            if kind == "stop":
                return
            self.board.apply_changes(body[-1])
            if kind == "commands":
                self.engine.submit_all(body[0])
                self.num_batches += 1

    def _report(self) -> None:
        last = None
        while not self._done.wait(STATUS_PERIOD_S if last is not None else 0):
            applied = self.num_batches  # before the status: it then reflects every batch counted
            status = self.engine.status()
            if (status, applied) != last:
                last = (status, applied)
                try:
                    self.channel.send(("status", status, applied))
                except OSError:
                    return
