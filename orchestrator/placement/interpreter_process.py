"""A stage process run by another Python interpreter (a venv with packages the server's lacks, e.g. vLLM).

Forked children share the server's interpreter and packages; this child is `python -m
orchestrator.placement.stage_process_main` of the stage's interpreter, with this checkout's packages first on
its path, its GPUs in its environment from the start (CUDA_VISIBLE_DEVICES, before torch or vLLM is imported)
and a socket pair in place of the pipe. It receives its StageProcessArgs as the first
message (the device board's slots attach by name: SharedSlots), then serves as a forked stage process does.
"""

from __future__ import annotations

import os
import socket
import subprocess
from multiprocessing.connection import Connection
from pathlib import Path

from orchestrator.placement.stage_process import StageProcessArgs
from orchestrator.placement.wire import Channel

CHECKOUT = Path(__file__).resolve().parents[2]  # the folder holding the orchestrator and stages packages


class InterpreterProcess:
    """The part of multiprocessing.Process's interface a ForkedStage uses, over a subprocess."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen = popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def join(self, timeout_s: float | None = None) -> None:
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass

    def terminate(self) -> None:
        self.popen.terminate()


def spawn_in_interpreter(python: Path, args: StageProcessArgs) -> tuple[InterpreterProcess, Channel]:
    """Start the stage process of `args` under `python`; FileNotFoundError names a missing interpreter."""
    if not python.is_file():
        raise FileNotFoundError(f"stage {args.spec.name}: no Python interpreter at {python}")
    parent_end, child_end = socket.socketpair()
    env = {**os.environ, **args.environment,
           "PYTHONPATH": os.pathsep.join(filter(None, (str(CHECKOUT), os.environ.get("PYTHONPATH"))))}
    with child_end:
        popen = subprocess.Popen([str(python), "-m", "orchestrator.placement.stage_process_main", str(child_end.fileno())],
                                 pass_fds=(child_end.fileno(),), env=env)
    channel = Channel(Connection(parent_end.detach()))
    channel.send(args)
    return InterpreterProcess(popen), channel
