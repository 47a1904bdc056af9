"""Two-tier test harness: a fake clock, tiny tiered managers with an inline worker, KV contents to check."""

from __future__ import annotations

import threading

import torch

from kvtier import HostTierConfig, KVCacheManager, KVPoolConfig

BLOCK = 2  # tokens per block
BYTES_PER_BLOCK = 2 * 2 * BLOCK * 1 * 2 * 4  # K and V, 2 layers, 1 head of dim 2, float32
POLICIES = ("lru", "next_use")


class FakeClock:
    """Seconds that move only when a test sets `t`."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make_tiered(eviction: str = "next_use", num_blocks: int = 8, host_blocks: int = 8, clock: FakeClock | None = None,
                gbps: float | None = None, chunk_blocks: int = 2, warm_protect_s: float = 5.0,
                mode: str = "inline", **kwargs) -> KVCacheManager:
    config = KVPoolConfig(num_blocks=num_blocks, num_layers=2, num_kv_heads=1, head_dim=2, block_size=BLOCK)
    host = HostTierConfig(host_blocks, emulated_link_gbps=gbps, warm_protect_s=warm_protect_s,
                          chunk_blocks=chunk_blocks)
    return KVCacheManager(config, host, eviction, clock or FakeClock(), transfer_mode=mode, **kwargs)


def value(seq: str, position: int, layer: int, is_value: bool) -> float:
    """A distinct number for every (sequence, position, layer, K or V)."""
    return sum(map(ord, seq)) * 1000.0 + position * 10.0 + layer * 2 + is_value


def write(kv: KVCacheManager, seq: str, start: int, end: int) -> None:
    """Write the KV of positions [start, end) of a resident, reserved sequence, as a model runner would."""
    slots = torch.tensor(kv.slot_ids(seq, start, end), dtype=torch.long)
    for layer in range(kv.config.num_layers):
        for is_value, tensor in enumerate(kv.cache.layer(layer)):
            flat = tensor.view(-1, *tensor.shape[2:])
            numbers = [value(seq, p, layer, bool(is_value)) for p in range(start, end)]
            flat[slots] = torch.tensor(numbers).view(-1, 1, 1).expand(-1, *tensor.shape[2:])


def grow(kv: KVCacheManager, seq: str, num_tokens: int) -> None:
    """Reserve up to `num_tokens` and write the new positions."""
    start = kv.table(seq).num_tokens
    kv.reserve(seq, num_tokens)
    write(kv, seq, start, num_tokens)


def read(kv: KVCacheManager, seq: str) -> list[list[float]]:
    """Per layer and K/V, the first element of every written position of a resident sequence."""
    slots = torch.tensor(kv.slot_ids(seq, 0, kv.table(seq).num_tokens))
    return [tensor.view(-1, *tensor.shape[2:])[slots][:, 0, 0].tolist()
            for layer in range(kv.config.num_layers) for tensor in kv.cache.layer(layer)]


def expected(kv: KVCacheManager, seq: str) -> list[list[float]]:
    num_tokens = kv.table(seq).num_tokens
    return [[value(seq, p, layer, bool(is_value)) for p in range(num_tokens)]
            for layer in range(kv.config.num_layers) for is_value in (0, 1)]


def settle(kv: KVCacheManager):
    """Run every queued transfer and complete it; the TransferDone records."""
    kv.tier.worker.run_all()
    done = kv.tier.poll()
    kv.check_integrity()
    return done


def idle(kv: KVCacheManager, seq: str, num_tokens: int, next_use: float | None = None) -> None:
    """A sequence that ran to `num_tokens`, went idle and is backed up on the host (evictable)."""
    grow(kv, seq, num_tokens)
    kv.set_evictable(seq, True)
    if next_use is not None:
        kv.set_next_use(seq, next_use)
    kv.store(seq)
    settle(kv)


class GatedCopier:
    """Wraps a worker's copier: each copy signals `started`, then waits for `release` (a test holds a copy open)."""

    def __init__(self, worker) -> None:
        self.inner, worker.copier = worker.copier, self
        self.started, self.release = threading.Event(), threading.Event()

    def copy(self, kind, src_ids, dst_ids) -> float:
        self.started.set()
        assert self.release.wait(5.0), "the test never released the copy"
        return self.inner.copy(kind, src_ids, dst_ids)


def idle_threaded(kv: KVCacheManager, seq: str, num_tokens: int) -> None:
    """`idle` for a threaded manager whose copier is gated: lets the store through, then closes the gate."""
    grow(kv, seq, num_tokens)
    kv.set_evictable(seq, True)
    kv.store(seq)
    kv.tier.worker.copier.release.set()
    while kv.tier.has_transfers_in_flight:
        kv.tier.wait_for_transfer(5.0)
        kv.tier.poll()
    kv.tier.worker.copier.started.clear()
    kv.tier.worker.copier.release.clear()
