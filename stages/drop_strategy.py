"""How much of its KV a request keeps: all of it, or its sinks and a window."""

from __future__ import annotations

from abc import ABC, abstractmethod

from kvtier import KVCacheManager
from stages.config import WindowSpec
from stages.requests.base import StageRequest


class DropStrategy(ABC):
    """What a request's KV keeps as it grows; the residency manager (KVResidency) consults it.

    Contract:
    - `never_fits(kv, request, end)`: why the request could never run a chunk ending
      at position `end` in this pool (an error message), or None;
    - `committed(kv, request)`: after a chunk of the request is committed, frees the
      KV no later query reads;
    - `check_truncate(kv, request_id, num_tokens)`: ValueError if keeping only the
      first `num_tokens` positions would need KV already freed (nothing is changed).
    """

    @abstractmethod
    def never_fits(self, kv: KVCacheManager, request: StageRequest, end: int) -> str | None: ...

    @abstractmethod
    def committed(self, kv: KVCacheManager, request: StageRequest) -> None: ...

    @abstractmethod
    def check_truncate(self, kv: KVCacheManager, request_id: str, num_tokens: int) -> None: ...


class KeepAll(DropStrategy):
    """No window: a request keeps all its KV, so all it knows of must fit the pool."""

    def never_fits(self, kv: KVCacheManager, request: StageRequest, end: int) -> str | None:
        if kv.fits_at_all(request.num_known):
            return None
        return f"needs {request.num_known} tokens of KV; the pool holds {kv.pool.num_blocks * kv.block_size}"

    def committed(self, kv: KVCacheManager, request: StageRequest) -> None:
        pass

    def check_truncate(self, kv: KVCacheManager, request_id: str, num_tokens: int) -> None:
        pass


class SinksAndWindow(DropStrategy):
    """A `WindowSpec`: every committed chunk frees the request's blocks that no later query reads
    (between its sink blocks and the block where the next position's window starts), so a request
    holds about sinks + window + one chunk of KV however long it runs, and only that must fit."""

    def __init__(self, window: WindowSpec) -> None:
        self.window = window

    def never_fits(self, kv: KVCacheManager, request: StageRequest, end: int) -> str | None:
        rid, capacity = request.request_id, kv.pool.num_blocks
        need = kv.num_blocks_held(rid) + kv.num_new_blocks(rid, end)
        if need <= capacity:
            return None
        return f"needs {need} blocks of KV for its window and chunk; the pool holds {capacity}"

    def committed(self, kv: KVCacheManager, request: StageRequest) -> None:
        kv.drop(request.request_id, self.window.sinks, request.num_computed - self.window.tokens)

    def check_truncate(self, kv: KVCacheManager, request_id: str, num_tokens: int) -> None:
        dropped = kv.dropped(request_id)
        if dropped and dropped.start < num_tokens < dropped.stop + self.window.tokens:
            raise ValueError(f"cannot keep {num_tokens} positions of {request_id!r}: the window freed the KV of "
                             f"positions {dropped.start}-{dropped.stop - 1}")


def drop_strategy(window: WindowSpec | None) -> DropStrategy:
    """SinksAndWindow for a window, KeepAll without one."""
    return KeepAll() if window is None else SinksAndWindow(window)
