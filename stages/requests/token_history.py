"""A request's token ids by absolute position, of which a run after the first few may be forgotten."""

from __future__ import annotations

from collections.abc import Iterable, Iterator


class TokenHistory:
    """Token ids of positions [0, len): appended, read and truncated like a list, by absolute position.

    `forget(start, stop)` lets go of the ids of positions [start, stop), where `start` is
    where any earlier forgetting began: a kept head (a window's sinks) stays, then come the
    `forgotten` positions, then the kept tail. Reading a forgotten position raises
    IndexError. So a stream that runs indefinitely holds its head and its recent tail only.
    """

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self._head: list[int] = []  # positions [0, len(head)), kept before a forgotten run (empty without one)
        self._tail: list[int] = list(ids)  # positions [tail_start, len)
        self._tail_start = 0

    @property
    def forgotten(self) -> range:
        return range(len(self._head), self._tail_start)

    def __len__(self) -> int:
        return self._tail_start + len(self._tail)

    def __getitem__(self, key: int | slice) -> int | list[int]:
        if isinstance(key, int):
            position = key + len(self) if key < 0 else key
            ids = self[position : position + 1]
            if not ids:
                raise IndexError(f"position {key} of {len(self)}")
            return ids[0]
        start, stop, step = key.indices(len(self))
        if step != 1:
            raise ValueError("a TokenHistory is read in runs of consecutive positions")
        if start >= self._tail_start:
            return self._tail[start - self._tail_start : stop - self._tail_start]
        if stop <= len(self._head) or start >= stop:
            return self._head[start:stop]
        gap = self.forgotten
        raise IndexError(f"positions {start}-{stop - 1} reach positions {gap.start}-{gap.stop - 1}, forgotten")

    def __iter__(self) -> Iterator[int]:
        return iter(self[0 : len(self)])

    def append(self, token_id: int) -> None:
        self._tail.append(token_id)

    def extend(self, token_ids: Iterable[int]) -> None:
        self._tail.extend(token_ids)

    def forget(self, start: int, stop: int) -> None:
        """Let go of positions [start, stop) (nothing if they are already forgotten)."""
        gap = self.forgotten
        if (gap and start != gap.start) or not 0 <= start < stop <= len(self):
            raise ValueError(f"cannot forget positions {start}-{stop - 1} of {len(self)} "
                             f"(forgotten: {gap.start}-{gap.stop - 1})")
        if stop <= self._tail_start:
            return
        if not gap:
            self._head = self._tail[:start]
        del self._tail[: stop - self._tail_start]
        self._tail_start = stop

    def truncate(self, num_tokens: int) -> None:
        """Keep positions [0, num_tokens): any number outside the forgotten run (else ValueError)."""
        gap = self.forgotten
        if gap and num_tokens <= gap.start:
            self._head, self._tail, self._tail_start = [], self._head[:num_tokens], 0
        elif gap and num_tokens < gap.stop:
            raise ValueError(f"cannot keep {num_tokens} positions: positions {gap.start}-{gap.stop - 1} are forgotten")
        else:
            del self._tail[max(0, num_tokens - self._tail_start) :]
