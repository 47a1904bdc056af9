"""Which SharedDevice boards each stage replica is on: one board per physical device (the CPU, each GPU),
with a slot for every replica computing there, on each of its GPUs for a replica spanning several."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, MutableSequence

from orchestrator.placement.shared_slots import SharedSlots
from stages.shared_device import Board


def seat_boards(devices: Mapping[str, tuple[Hashable, ...]],
                make_slots: Callable[[int], MutableSequence[int]]) -> dict[str, tuple[Board, ...]]:
    """Each replica's boards, by its name: for every device in `devices[name]`, that device's slots (made
    once, by `make_slots(how many replicas compute there)`) and the replica's slot on them."""
    users: dict[Hashable, list[str]] = defaultdict(list)
    for name, keys in devices.items():
        for key in keys:
            users[key].append(name)
    slots = {key: make_slots(len(names)) for key, names in users.items()}
    return {name: tuple((slots[key], users[key].index(name)) for key in keys) for name, keys in devices.items()}


class SharedBoards:
    """The boards a launcher seats its stages on, in named shared memory (any process on the machine attaches),
    closed together once every stage has stopped."""

    def __init__(self) -> None:
        self._made: list[SharedSlots] = []

    def seat(self, devices: Mapping[str, tuple[Hashable, ...]]) -> dict[str, tuple[Board, ...]]:
        """seat_boards over new shared-memory slots."""
        return seat_boards(devices, self._make)

    def _make(self, size: int) -> SharedSlots:
        self._made.append(SharedSlots.create(size))
        return self._made[-1]

    def close(self) -> None:
        for slots in self._made:
            slots.close()
        self._made.clear()
