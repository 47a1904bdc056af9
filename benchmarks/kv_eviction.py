"""Cost of choosing and evicting KV blocks from the host-backed device tier, per policy.

A device pool holds 625 idle sequences of 16 blocks each (10,000 candidate blocks),
all backed up on a host tier, evictable, with next-use hints spread over 100 s and
last-use times spread over 10 s. For each policy (lru, next_use) and scenario,
measured per call with a fresh pool each time:

- `evict(1)`: evict every block one call at a time (the victim is re-filed after each).
- `evict(16)`: evict a whole sequence's worth per call (per call and per block).
- `evict(1)+hints`: evict(1) calls interleaved with a hint update of a random
  candidate (set_next_use under next_use, set_evictable(True) under lru): the hint
  update is timed apart.

The target is at most 50 us per eviction. Transfers run inline (no thread); the
clock is fake, so no protection expires.

    .venv/bin/python benchmarks/kv_eviction.py [--sequences 625] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from pathlib import Path

from kvtier import HostTierConfig, KVCacheManager, KVPoolConfig

BLOCKS_PER_SEQ = 16
BLOCK_SIZE = 16


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


def build(policy: str, num_seqs: int, seed: int) -> tuple[KVCacheManager, Clock, list[str]]:
    """Every sequence reserved, written back to the host and marked idle with its hints."""
    rng, clock = random.Random(seed), Clock()
    num_blocks = num_seqs * BLOCKS_PER_SEQ
    config = KVPoolConfig(num_blocks=num_blocks, num_layers=1, num_kv_heads=1, head_dim=2, block_size=BLOCK_SIZE)
    kv = KVCacheManager(config, HostTierConfig(num_blocks), policy, clock, transfer_mode="inline")
    seqs = [f"s{i}" for i in range(num_seqs)]
    for seq in seqs:
        clock.t = rng.uniform(0.0, 10.0)
        kv.reserve(seq, BLOCKS_PER_SEQ * BLOCK_SIZE)
        kv.store(seq)
        kv.set_evictable(seq, True)
        kv.set_next_use(seq, rng.uniform(10.0, 110.0))
    kv.tier.worker.run_all()
    kv.tier.poll()
    clock.t = 10.0
    assert kv.tier.num_evictable_blocks() == num_blocks, kv.tier.num_evictable_blocks()
    return kv, clock, seqs


def summary(samples_ns: list[int], per: int = 1) -> dict[str, float]:
    ordered = sorted(samples_ns)
    return {
        "calls": len(ordered),
        "mean_us": statistics.fmean(ordered) / 1e3 / per,
        "p50_us": ordered[len(ordered) // 2] / 1e3 / per,
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1e3 / per,
        "max_us": ordered[-1] / 1e3 / per,
    }


def drain(kv: KVCacheManager, per_call: int) -> list[int]:
    samples = []
    while kv.tier.num_evictable_blocks():
        started = time.perf_counter_ns()
        ok = kv.tier.evict(per_call)
        samples.append(time.perf_counter_ns() - started)
        assert ok
    return samples


def drain_with_hints(kv: KVCacheManager, clock: Clock, seqs: list[str], policy: str, seed: int
                     ) -> tuple[list[int], list[int]]:
    rng, evicts, hints = random.Random(seed), [], []
    while kv.tier.num_evictable_blocks():
        seq = rng.choice(seqs)
        clock.t += 1e-3
        started = time.perf_counter_ns()
        if policy == "next_use":
            kv.set_next_use(seq, rng.uniform(10.0, 110.0))
        else:
            kv.set_evictable(seq, True)
        hints.append(time.perf_counter_ns() - started)
        started = time.perf_counter_ns()
        ok = kv.tier.evict(1)
        evicts.append(time.perf_counter_ns() - started)
        assert ok
    return evicts, hints


def measure(policy: str, num_seqs: int, seed: int) -> dict[str, dict[str, float]]:
    results = {}
    kv, _, _ = build(policy, num_seqs, seed)
    results["evict(1)"] = summary(drain(kv, 1))
    kv.check_integrity()
    kv, _, _ = build(policy, num_seqs, seed)
    per_call = drain(kv, BLOCKS_PER_SEQ)
    results[f"evict({BLOCKS_PER_SEQ})"] = summary(per_call)
    results[f"evict({BLOCKS_PER_SEQ}) per block"] = summary(per_call, BLOCKS_PER_SEQ)
    kv.check_integrity()
    kv, clock, seqs = build(policy, num_seqs, seed)
    evicts, hints = drain_with_hints(kv, clock, seqs, policy, seed)
    results["evict(1)+hints"] = summary(evicts)
    results["  the hint update"] = summary(hints)
    kv.check_integrity()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=625)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = {policy: measure(policy, args.sequences, args.seed) for policy in ("lru", "next_use")}
    print(f"{args.sequences} idle sequences x {BLOCKS_PER_SEQ} blocks = {args.sequences * BLOCKS_PER_SEQ} "
          "candidate blocks; us per call (per block where marked)")
    columns = ("mean_us", "p50_us", "p99_us", "max_us")
    print(f"{'':34}" + "".join(f"{c[:-3]:>9}" for c in columns) + f"{'calls':>8}")
    for policy, scenarios in results.items():
        for scenario, figures in scenarios.items():
            print(f"{policy + ' ' + scenario:34}" + "".join(f"{figures[c]:9.2f}" for c in columns)
                  + f"{figures['calls']:8d}")
    if args.json is not None:
        meta = {"sequences": args.sequences, "blocks_per_sequence": BLOCKS_PER_SEQ, "seed": args.seed,
                "python": platform.python_version(), "machine": platform.machine()}
        args.json.write_text(json.dumps({"setup": meta, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
