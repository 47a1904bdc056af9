"""Sequences holding blocks that may be taken from them, smallest key first."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

from kvtier.indexed_heap import IndexedHeap

T = TypeVar("T", bound=Hashable)


class VictimHeap(Generic[T]):
    """An indexed heap of items that each offer some blocks, with the total offered.

    `put(item, key, num_blocks)` adds, re-keys or re-counts an item (0 blocks drops
    it); `take(n)` pops items smallest key first until they offer n blocks and returns
    them with how many blocks to take from each (the last one possibly fewer than it
    offers), or None and changes nothing if they cannot. Taken items leave the heap:
    the caller takes the blocks and puts back what is left.
    """

    def __init__(self) -> None:
        self._heap: IndexedHeap[T] = IndexedHeap()
        self._offered: dict[T, int] = {}
        self.num_blocks = 0

    def __contains__(self, item: object) -> bool:
        return item in self._offered

    def __len__(self) -> int:
        return len(self._offered)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._offered))

    def offered(self, item: T) -> int:
        return self._offered.get(item, 0)

    def peek(self) -> T:
        """The item with the smallest key (the heap must not be empty)."""
        return self._heap.peek()

    def key_of(self, item: T) -> Any:
        return self._heap.key_of(item)

    def put(self, item: T, key: Any, num_blocks: int) -> None:
        if num_blocks <= 0:
            self.discard(item)
            return
        self.num_blocks += num_blocks - self._offered.get(item, 0)
        self._offered[item] = num_blocks
        self._heap.push(item, key)

    def discard(self, item: T) -> None:
        if self._heap.remove(item):
            self.num_blocks -= self._offered.pop(item)

    def take(self, n: int, admits: Callable[[T], bool] | None = None) -> list[tuple[T, int]] | None:
        """Items, smallest key first, and blocks to take from each, summing to n; stops at the first item
        `admits` refuses (so `admits` must refuse every larger key once it refuses one)."""
        if n > self.num_blocks:
            return None
        taken: list[tuple[T, int, int, Any]] = []  # item, blocks to take, blocks offered, key
        while n > 0 and (admits is None or admits(self._heap.peek())):
            item = self._heap.peek()
            key, offered = self._heap.key_of(item), self._offered[item]
            self.discard(item)
            taken.append((item, min(n, offered), offered, key))
            n -= offered
        if n > 0:
            for item, _, offered, key in taken:
                self.put(item, key, offered)
            return None
        return [(item, num_blocks) for item, num_blocks, _, _ in taken]

    def check_integrity(self) -> None:
        self._heap.check_integrity()
        assert set(self._heap) == set(self._offered), "heap and block counts list different items"
        assert all(n > 0 for n in self._offered.values()), "an item offers no blocks"
        assert self.num_blocks == sum(self._offered.values()), "block total off"
