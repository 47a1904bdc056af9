"""A SharedDevice board's slots in named shared memory, which stage processes not forked from the server (Ray
actors on its node) attach to by name."""

from __future__ import annotations

from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory


class SharedSlots:
    """`size` bytes (a SharedDevice board's slots) in the shared memory segment `name`; pickled, it attaches to
    the same segment (on the same machine). The creator (`create`) unlinks it at `close`; an attacher leaves it
    alone."""

    def __init__(self, memory: SharedMemory, size: int, owner: bool) -> None:
        self._memory, self.size, self._owner = memory, size, owner
        self._view = memory.buf[:size]

    @classmethod
    def create(cls, size: int) -> SharedSlots:
        memory = SharedMemory(create=True, size=max(1, size))
        memory.buf[:size] = bytes(size)
        return cls(memory, size, owner=True)

    @classmethod
    def attach(cls, name: str, size: int) -> SharedSlots:
        memory = SharedMemory(name)
        resource_tracker.unregister(memory._name, "shared_memory")  # else this process's exit unlinks it
        return cls(memory, size, owner=False)

    def __reduce__(self):
        return SharedSlots.attach, (self._memory.name, self.size)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, slot: int) -> int:
        return self._view[slot]

    def __setitem__(self, slot: int, value: int) -> None:
        self._view[slot] = value

    def __iter__(self):
        return iter(self._view.tolist())

    def close(self) -> None:
        self._view.release()
        self._memory.close()
        if self._owner:  # an attacher sharing this process's resource tracker unregistered the name: track it again
            resource_tracker.register(self._memory._name, "shared_memory")  # so that unlink's unregister finds it
            self._memory.unlink()
