"""A binary min-heap whose items can be re-keyed or removed by name."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T", bound=Hashable)


class IndexedHeap(Generic[T]):
    """Distinct items, each with a key; the smallest key comes out first.

    `push` adds an item or re-keys one already in, `remove` drops one, `pop` takes the
    smallest: all O(log n); `peek`, `key_of`, `in` and `len` are O(1). Keys are any
    mutually comparable values (make them unique, e.g. `(key, serial)`, for a
    deterministic order among equal keys); items themselves are never compared.
    """

    def __init__(self) -> None:
        self._entries: list[list[Any]] = []  # [key, item], in heap order
        self._position: dict[T, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, item: object) -> bool:
        return item in self._position

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._position))

    def key_of(self, item: T) -> Any:
        return self._entries[self._position[item]][0]

    def peek(self) -> T:
        return self._entries[0][1]

    def push(self, item: T, key: Any) -> None:
        position = self._position.get(item)
        if position is None:
            self._entries.append([key, item])
            self._sift_up(len(self._entries) - 1)
            return
        entry = self._entries[position]
        old, entry[0] = entry[0], key
        if key < old:
            self._sift_up(position)
        else:
            self._sift_down(position)

    def pop(self) -> T:
        item = self._entries[0][1]
        self.remove(item)
        return item

    def remove(self, item: T) -> bool:
        """Drop `item`; False if it was not in."""
        position = self._position.pop(item, None)
        if position is None:
            return False
        last = self._entries.pop()
        if position < len(self._entries):
            self._entries[position] = last
            self._position[last[1]] = position
            self._sift_up(position)
            self._sift_down(self._position[last[1]])
        return True

    def _sift_up(self, position: int) -> None:
        entries, where = self._entries, self._position
        entry = entries[position]
        while position > 0:
            parent = (position - 1) >> 1
            if not entry[0] < entries[parent][0]:
                break
            entries[position] = entries[parent]
            where[entries[position][1]] = position
            position = parent
        entries[position] = entry
        where[entry[1]] = position

    def _sift_down(self, position: int) -> None:
        entries, where = self._entries, self._position
        entry, size = entries[position], len(entries)
        while (child := 2 * position + 1) < size:
            if child + 1 < size and entries[child + 1][0] < entries[child][0]:
                child += 1
            if not entries[child][0] < entry[0]:
                break
            entries[position] = entries[child]
            where[entries[position][1]] = position
            position = child
        entries[position] = entry
        where[entry[1]] = position

    def check_integrity(self) -> None:
        assert len(self._position) == len(self._entries), "index and heap differ in size"
        for position, (key, item) in enumerate(self._entries):
            assert self._position[item] == position, f"{item!r} indexed at the wrong position"
            assert position == 0 or not key < self._entries[(position - 1) >> 1][0], "heap order broken"
