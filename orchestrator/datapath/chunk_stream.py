"""Chunking of an item stream between two stages: small first chunk, then steady ones."""

from __future__ import annotations

from typing import Generic, TypeVar

from orchestrator.datapath.stage_graph import ChunkSizes

T = TypeVar("T")


class ChunkStream(Generic[T]):
    """Buffers items; `push` returns the chunks now due, `close` the remainder.

    The first chunk is released at `first_chunk` items, later ones every `chunk`
    items (ramping up to it if the sizes say so), so downstream starts early and then
    works in efficient batches.
    """

    def __init__(self, sizes: ChunkSizes) -> None:
        self.sizes = sizes
        self._buffer: list[T] = []
        self.num_released = 0

    def push(self, items: list[T]) -> list[list[T]]:
        self._buffer.extend(items)
        chunks = []
        while len(self._buffer) >= self._due():
            size = self._due()
            chunks.append(self._buffer[:size])
            del self._buffer[:size]
            self.num_released += 1
        return chunks

    @property
    def num_buffered(self) -> int:
        """Items waiting for the next chunk to fill."""
        return len(self._buffer)

    def whole_chunks(self, num_more: int) -> int:
        """How many of the buffered items and `num_more` items still to come leave in whole chunks."""
        total = left = len(self._buffer) + num_more
        index = self.num_released
        while left >= (size := self.sizes.size(index)):
            if index > 0 and size == self.sizes.chunk:
                return total - left % size
            left -= size
            index += 1
        return total - left

    def close(self) -> list[T]:
        rest, self._buffer = self._buffer, []
        return rest

    def _due(self) -> int:
        return self.sizes.size(self.num_released)
