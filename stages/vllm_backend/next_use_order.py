"""The order behind vLLM's next-use CachePolicy (cache_policy.py), in pure Python: the offloaded chunks by
recency, the sessions using each, and which to evict: farthest next use first, least recently used among equals."""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

NextUseOf = Callable[[str], "float | None"]  # session -> clock time it is needed next; None: unknown


def unknown(session: str) -> float | None:
    return None


class NextUseOrder:
    """Chunks (opaque values under hashable keys) in recency order, each bound to the sessions whose requests
    stored, loaded or reused it, and the evictable ones among them.

    - `used(keys, session)`: one request's access, its keys head (prefix) first: they become the most recently
      used, the head most of all, so a session's tail goes before its head; each key, present or about to be
      added, is bound to `session` (None: no session known).
    - `victims(n, protected)`: exactly n evictable keys not in `protected`, or None (and nothing changes):
      farthest next use first, a key's next use being the soonest of its sessions' (`next_use_of`; unknown,
      or no session: infinitely far); equal next uses (one session's keys, or all unknown) least recently
      used first. With no session known, or `next_use_of` answering None throughout, this is LRU order.
    """

    def __init__(self, next_use_of: NextUseOf = unknown) -> None:
        self.next_use_of = next_use_of
        self.chunks: OrderedDict[Hashable, Any] = OrderedDict()  # least recently used first
        self.evictable: set[Hashable] = set()
        self.sessions: dict[Hashable, set[str]] = {}  # may run ahead of `chunks`: keys bound before they are added

    def add(self, key: Hashable, chunk: Any, evictable: bool) -> None:
        self.chunks[key] = chunk
        self.chunks.move_to_end(key)
        self.set_evictable(key, evictable)

    def set_evictable(self, key: Hashable, evictable: bool) -> None:
        if evictable:
            self.evictable.add(key)
        else:
            self.evictable.discard(key)

    def pop(self, key: Hashable) -> Any:
        self.evictable.discard(key)
        self.sessions.pop(key, None)
        return self.chunks.pop(key)

    def used(self, keys: Sequence[Hashable], session: str | None) -> None:
        if len(self.sessions) > 2 * max(len(self.chunks), 64):  # bindings of keys whose store never came
            self.sessions = {key: owners for key, owners in self.sessions.items() if key in self.chunks}
        for key in reversed(keys):
            if session is not None:
                self.sessions.setdefault(key, set()).add(session)
            if key in self.chunks:
                self.chunks.move_to_end(key)

    def victims(self, n: int, protected: Iterable[Hashable]) -> list[Hashable] | None:
        protected = set(protected)
        candidates = [key for key in self.chunks if key in self.evictable and key not in protected]
        if len(candidates) < n:
            return None
        times: dict[str, float] = {}
        return heapq.nsmallest(n, candidates, key=lambda key: -self._next_use(key, times))

    def _next_use(self, key: Hashable, times: dict[str, float]) -> float:
        soonest = math.inf
        for session in self.sessions.get(key, ()):
            if session not in times:
                at = self.next_use_of(session)
                times[session] = math.inf if at is None else at
            soonest = min(soonest, times[session])
        return soonest

    def check_integrity(self) -> None:
        assert self.evictable <= self.chunks.keys(), "an evictable key that is not cached"
