"""The sequences eviction may take device blocks from, in policy order."""

from __future__ import annotations

from collections.abc import Callable

from kvtier.eviction.policy import EvictionPolicy
from kvtier.indexed_heap import IndexedHeap
from kvtier.sequence_kv import SequenceKV
from kvtier.victim_heap import VictimHeap


class EvictionCandidates:
    """Eviction candidates ordered by the policy, and the ones waiting out a protection.

    The manager calls `update(state, num_blocks, now)` after every change to a
    sequence, with the device blocks it could give up (0: not a candidate). A
    candidate protected past `now` waits in a heap keyed by the end of its
    protection and joins the ready ones once the clock passes it (`expire`, run by
    `take`). `num_blocks` counts ready candidates' blocks only. Ready candidates are
    keyed `(policy.key(hint), serial)`: every operation is O(log n).
    """

    def __init__(self, policy: EvictionPolicy) -> None:
        self.policy = policy
        self.ready: VictimHeap[SequenceKV] = VictimHeap()
        self._protected: IndexedHeap[SequenceKV] = IndexedHeap()
        self._waiting: dict[SequenceKV, int] = {}  # protected candidate -> its blocks

    def __len__(self) -> int:
        return len(self.ready) + len(self._waiting)

    def offered(self, state: SequenceKV) -> int:
        return self.ready.offered(state) or self._waiting.get(state, 0)

    def key(self, state: SequenceKV) -> tuple[float, int]:
        return self.policy.key(state.hint), state.serial

    def update(self, state: SequenceKV, num_blocks: int, now: float) -> None:
        if num_blocks <= 0:
            self.discard(state)
        elif state.protected_until > now:
            self.ready.discard(state)
            self._waiting[state] = num_blocks
            self._protected.push(state, (state.protected_until, state.serial))
        else:
            if self._protected.remove(state):
                del self._waiting[state]
            self.ready.put(state, self.key(state), num_blocks)

    def discard(self, state: SequenceKV) -> None:
        self.ready.discard(state)
        if self._protected.remove(state):
            del self._waiting[state]

    def expire(self, now: float) -> None:
        """Protections that ended by `now` make their sequences ready."""
        protected = self._protected
        while protected and protected.key_of(protected.peek())[0] <= now:
            state = protected.pop()
            self.ready.put(state, self.key(state), self._waiting.pop(state))

    def lift(self, now: float) -> int:
        """End every protection now (they become ready); how many there were."""
        lifted = len(self._waiting)
        for state, num_blocks in self._waiting.items():
            state.protected_until = now
            self._protected.remove(state)
            self.ready.put(state, self.key(state), num_blocks)
        self._waiting.clear()
        return lifted

    def take(self, n: int, now: float, admits: Callable[[SequenceKV], bool] | None = None
             ) -> list[tuple[SequenceKV, int]] | None:
        """Victims for exactly n blocks (see VictimHeap.take), after expiring protections."""
        self.expire(now)
        return self.ready.take(n, admits)

    def check_integrity(self, now: float) -> None:
        self.ready.check_integrity()
        self._protected.check_integrity()
        assert set(self._protected) == set(self._waiting), "protected heap and its block counts differ"
        assert not any(state in self.ready for state in self._waiting), "a candidate is both ready and protected"
        for state in self.ready:
            assert self.ready.key_of(state) == self.key(state), f"{state.seq!r}: stale eviction key"
        for state in self._waiting:
            protection = (state.protected_until, state.serial)
            assert self._protected.key_of(state) == protection, f"{state.seq!r}: stale protection"
