"""vLLM's KV block pool as LiveServe's scheduling policies read a stage's KV (PolicyKV). Pure Python: vllm_api
hands it the pool's counts and, before each step is ordered, the generations holding KV."""

from __future__ import annotations

from collections.abc import Callable, Iterable


class VllmPoolKV:
    """vLLM's block pool seen from its scheduler. `usage()` gives (blocks in use, usable blocks): a block is in
    use while a request references it (blocks prefix caching keeps that no request references are free, as
    vLLM counts them). `observe` is told, before each step is ordered, each generation vLLM holds KV for (by
    LiveServe request id) with its computed tokens; it holds the blocks those fill. Nothing counts as
    offloaded: vLLM's host cache keeps copies, and a preempted generation's KV is freed, not moved out."""

    num_offloaded_blocks_total = 0

    def __init__(self, usage: Callable[[], tuple[int, int]], block_size: int) -> None:
        self.usage, self.block_size = usage, block_size
        self._held: dict[str, int] = {}

    def observe(self, holders: Iterable[tuple[str, int]]) -> None:
        self._held = {request_id: -(-num_tokens // self.block_size) for request_id, num_tokens in holders}

    @property
    def num_blocks(self) -> int:
        return self.usage()[1]

    @property
    def num_used_blocks(self) -> int:
        return self.usage()[0]

    @property
    def occupancy(self) -> float:
        used, usable = self.usage()
        return used / usable

    def num_blocks_held(self, request_id: str) -> int:
        return self._held.get(request_id, 0)
