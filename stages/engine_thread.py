"""The thread side every stage engine shares: command batches other threads submit, one thread that applies
them and steps."""

from __future__ import annotations

import queue
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence

from stages.commands import Command


class EngineThread(ABC):
    """Other threads `submit` commands (a batch is applied in order, all before the same step); `start` runs
    `run` on a thread of the engine's own, `stop` ends it. `_is_idle` is the engine's own record, under
    `_idle_lock`, of having nothing queued and nothing ready; a submit clears it.

    Contract: `run` loops until `_stop` is set, taking batches from `_commands` (stages.commands.queued_batches).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._commands: queue.SimpleQueue[Sequence[Command]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._idle_lock = threading.Lock()
        self._is_idle = True

    def submit(self, command: Command) -> None:
        self.submit_all((command,))

    def submit_all(self, commands: Sequence[Command]) -> None:
        """Queue `commands` as one batch: they are applied in order, all before the same step."""
        with self._idle_lock:
            self._is_idle = False
            self._commands.put(commands)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"stage-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @abstractmethod
    def run(self) -> None:
        """The engine thread's loop."""
