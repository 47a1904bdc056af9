"""How much of its KV a request keeps: all of it, or its sinks and a window."""

from __future__ import annotations

from abc import ABC, abstractmethod

from kvtier import KVCacheManager, blocks_for
from stages.config import WindowSpec
from stages.models.history import STATE_SIZE, absorbed_end, state_blocks
from stages.requests.base import StageRequest


class DropStrategy(ABC):
    """What a request's KV keeps as it grows; the residency manager (KVResidency) consults it.

    Contract:
    - `never_fits(kv, request, end)`: why the request could never run a chunk ending
      at position `end` in this pool (an error message), or None;
    - `committed(kv, request)`: after a chunk of the request is committed, frees the
      KV no later query reads, and tells the request (`forget`) the inputs no later
      step reads, recomputation after a preemption included: what it keeps must
      rebuild the KV it holds;
    - `check_truncate(kv, request, num_tokens)`: ValueError if keeping only the
      first `num_tokens` positions would need KV already freed, or would take back
      what a history state absorbed (nothing is changed);
    - `state_blocks(kv)`: blocks of state a request keeps beside its KV (a history
      branch's; 0: none), which come first and stay until it is freed;
    - `recomputable`: whether a request's KV can be rebuilt from the inputs it
      keeps; if not (a history state), it is never preempted.
    """

    recomputable = True

    @abstractmethod
    def never_fits(self, kv: KVCacheManager, request: StageRequest, end: int) -> str | None: ...

    @abstractmethod
    def committed(self, kv: KVCacheManager, request: StageRequest) -> None: ...

    @abstractmethod
    def check_truncate(self, kv: KVCacheManager, request: StageRequest, num_tokens: int) -> None: ...

    def state_blocks(self, kv: KVCacheManager) -> int:
        return 0


class KeepAll(DropStrategy):
    """No window: a request keeps all its KV, so all it knows of must fit the pool."""

    def never_fits(self, kv: KVCacheManager, request: StageRequest, end: int) -> str | None:
        if kv.fits_at_all(request.num_known):
            return None
        return f"needs {request.num_known} tokens of KV; the pool holds {kv.pool.num_blocks * kv.block_size}"

    def committed(self, kv: KVCacheManager, request: StageRequest) -> None:
        pass

    def check_truncate(self, kv: KVCacheManager, request: StageRequest, num_tokens: int) -> None:
        pass


class SinksAndWindow(DropStrategy):
    """A `WindowSpec`: every committed chunk frees the request's blocks that no later query reads
    (between its sink blocks and the block where the next position's window starts), so a request
    holds about sinks + window + one chunk of KV however long it runs, and only that must fit.

    Its inputs are bounded the same way. A layer's KV at position p is computed from the layer
    below at positions [p - W, p] and the sinks, so the KV of every layer of the window
    [c - W, c) before the next position c follows from the sinks' inputs and those of the last
    L x W positions (L layers) alone: positions before them are never read again, not even by a
    recomputation. The request keeps the inputs of its sink blocks and of its last L x W positions
    (block-aligned) and forgets the rest; preempted, it recomputes its sink blocks, then from
    there, and rebuilds the KV it held: the first positions recomputed see less than they did,
    and what that changes reaches, a layer up per W positions, none of the window's KV.
    Recomputation costs at most sinks + L x W + a block, however long the request ran.

    With a history branch (`window.history`) each request also keeps a state in blocks of its
    own, from its first chunk to its end, which every chunk writes (`committed` says so to the
    KV manager: their host copies are stale). That state has absorbed positions [S, c - W) by
    position c: the argument above no longer holds (every position the stream saw reaches it),
    so the request is not recomputable, and a truncation that would take back absorbed
    positions is refused.
    """

    def __init__(self, window: WindowSpec) -> None:
        self.window = window
        self.recomputable = window.history is None

    def state_blocks(self, kv: KVCacheManager) -> int:
        return 0 if self.window.history is None else state_blocks(STATE_SIZE, kv.block_size)

    def never_fits(self, kv: KVCacheManager, request: StageRequest, end: int) -> str | None:
        rid, capacity = request.request_id, kv.pool.num_blocks
        held = kv.num_blocks_held(rid) + kv.num_offloaded_blocks(rid)
        need = held + kv.num_new_blocks(rid, end, request.num_computed) + (0 if held else self.state_blocks(kv))
        if need <= capacity:
            return None
        return f"needs {need} blocks of KV for its window and chunk; the pool holds {capacity}"

    def committed(self, kv: KVCacheManager, request: StageRequest) -> None:
        if self.window.history is not None:
            kv.state_written(request.request_id)
        kv.drop(request.request_id, self.window.sinks, request.num_computed - self.window.tokens)
        size = kv.block_size
        sink_end = blocks_for(self.window.sinks, size) * size
        horizon = self.window.tokens * kv.config.num_layers
        keep_from = (request.num_computed - horizon) // size * size
        if keep_from > sink_end:
            request.forget(sink_end, keep_from)

    def check_truncate(self, kv: KVCacheManager, request: StageRequest, num_tokens: int) -> None:
        request_id, dropped = request.request_id, kv.dropped(request.request_id)
        if dropped and dropped.start < num_tokens < dropped.stop + self.window.tokens:
            raise ValueError(f"cannot keep {num_tokens} positions of {request_id!r}: the window freed the KV of "
                             f"positions {dropped.start}-{dropped.stop - 1}")
        tokens, sinks = self.window.tokens, self.window.sinks
        absorbed = absorbed_end(request.num_computed, tokens, sinks)
        if self.window.history is not None and absorbed_end(num_tokens, tokens, sinks) < absorbed:
            raise ValueError(f"cannot keep {num_tokens} positions of {request_id!r}: its history state absorbed "
                             f"positions {sinks}-{absorbed - 1}")


def drop_strategy(window: WindowSpec | None) -> DropStrategy:
    """SinksAndWindow for a window, KeepAll without one."""
    return KeepAll() if window is None else SinksAndWindow(window)
