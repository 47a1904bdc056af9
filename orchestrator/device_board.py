"""The memory of the stage processes' device board (SharedDevice's slots), shared whatever their interpreter.

multiprocessing's shared memory reaches only the children multiprocessing starts; a stage process of
another interpreter (the vLLM backend's venv) is not one of them. The board is instead an unlinked
file that every stage process maps: its descriptor crosses each process's pipe (a Unix socket) as it
starts, so every process, forked or of another interpreter, reads and writes the same bytes, and
the file vanishes with its last mapping.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from multiprocessing.connection import Connection
from multiprocessing.reduction import recv_handle, send_handle


class DeviceBoardMemory:
    """`num_slots` booleans (one per stage process), all False at first, handed to stage processes."""

    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self._file = tempfile.TemporaryFile()
        self._file.truncate(num_slots)

    def send(self, connection: Connection, pid: int) -> None:
        """Pass the board to the process `pid` at the other end of `connection` (it calls `receive_slots`)."""
        send_handle(connection, self._file.fileno(), pid)

    def close(self) -> None:
        self._file.close()


def receive_slots(connection: Connection, num_slots: int) -> memoryview:
    """The board DeviceBoardMemory.send passed down `connection`, mapped: a writable sequence of bools."""
    fd = recv_handle(connection)
    try:
        mapping = mmap.mmap(fd, num_slots)
    finally:
        os.close(fd)
    return memoryview(mapping).cast("?")
