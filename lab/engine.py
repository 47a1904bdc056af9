"""`liveserve bench engine`: thinker prefill and decode throughput on the stage engine.

Method (the same as benchmarks/vllm_cpu_compare.py uses for vLLM): B prompts of 128
random token ids; t1 = wall time until every request has its first token; t2 = wall
time until every request has 129 tokens (greedy, ignore_eos); each the median of
REPEATS runs; prefill tok/s = B*128/t1, decode tok/s = B*128/(t2 - t1). One warm-up
run precedes the timed ones.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from kvtier import KVCacheManager, KVPoolConfig, blocks_for
from liveserve.config.loader import LiveServeConfig
from liveserve.runtime import configure_torch
from stages.config import SamplingParams, SchedulerConfig
from stages.engine import StageEngine
from stages.factory import build_model, decoder_of, runner_of
from stages.requests import ThinkerRequest, TurnInput
from stages.runners.base import ModelRunner
from stages.scheduler import Scheduler

PROMPT_LEN, OUTPUT_LEN = 128, 128
REPEATS = 5


@dataclass(frozen=True)
class Generation:
    """What each timed generation builds afresh: a KV pool of `pool`'s shape (its blocks grown to hold the
    batch), a scheduler of `scheduler`, the runner `runner_for` makes over that pool, and prompts of
    `prompt_len` random ids below `vocab_size`."""

    pool: KVPoolConfig
    scheduler: SchedulerConfig
    runner_for: Callable[[KVCacheManager], ModelRunner]
    vocab_size: int
    max_position: int
    prompt_len: int = PROMPT_LEN


def run_engine_bench(config: LiveServeConfig, batch_sizes: tuple[int, ...] = (1, 16, 64)) -> dict:
    configure_torch(config.runtime)
    spec = config.pipeline.thinker
    model, decoder = build_model(spec), decoder_of(spec)
    generation = Generation(
        KVPoolConfig(num_blocks=spec.kv.num_blocks, block_size=spec.kv.block_size, num_layers=decoder.num_layers,
                     num_kv_heads=decoder.num_kv_heads, head_dim=decoder.head_dim, dtype=spec.dtype,
                     device=spec.device),
        spec.scheduler, lambda kv: runner_of(spec, model, kv), decoder.vocab_size, decoder.max_position)
    results = {}
    for batch in batch_sizes:
        timed_generation(generation, batch, max_tokens=2)
        t1 = statistics.median(timed_generation(generation, batch, 1) for _ in range(REPEATS))
        t2 = statistics.median(timed_generation(generation, batch, OUTPUT_LEN + 1) for _ in range(REPEATS))
        results[str(batch)] = {
            "prefill_tok_s": round(batch * PROMPT_LEN / t1, 1),
            "decode_tok_s": round(batch * OUTPUT_LEN / (t2 - t1), 1),
        }
    return {"engine": "liveserve", "torch_threads": config.runtime.torch_threads, "dtype": spec.dtype,
            "device": spec.device, "prompt_len": PROMPT_LEN, "output_len": OUTPUT_LEN, "repeats": REPEATS,
            "results": results}


def timed_generation(generation: Generation, batch: int, max_tokens: int) -> float:
    """Seconds until each of `batch` requests has `max_tokens` tokens, on a fresh engine (see `new_engine`)."""
    engine = new_engine(generation, batch, max_tokens)
    started = time.perf_counter()
    while engine.scheduler.requests:
        engine.step()
    return time.perf_counter() - started


def new_engine(generation: Generation, batch: int, max_tokens: int) -> StageEngine:
    """A fresh engine over a pool that holds them all, given `batch` requests of random prompts (seeded by `batch`),
    each to generate `max_tokens` tokens (greedy, ignore_eos)."""
    pool = generation.pool
    needed = batch * blocks_for(generation.prompt_len + max_tokens, pool.block_size)
    kv = KVCacheManager(replace(pool, num_blocks=max(needed, pool.num_blocks)))
    engine = StageEngine("thinker", Scheduler(generation.scheduler, kv, time.monotonic), generation.runner_for(kv),
                         lambda _: None)
    gen = torch.Generator().manual_seed(batch)
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    for i in range(batch):
        request = ThinkerRequest(f"r{i}", float(i), frozenset(), generation.max_position)
        prompt = torch.randint(10, generation.vocab_size, (generation.prompt_len,), generator=gen).tolist()
        request.append(TurnInput(prompt, sampling=sampling), close=True)
        engine.scheduler.add(request)
    return engine


def format_table(result: dict) -> str:
    lines = [f"{'batch':>6} {'prefill tok/s':>14} {'decode tok/s':>13}"]
    for batch, row in result["results"].items():
        lines.append(f"{batch:>6} {row['prefill_tok_s']:>14.1f} {row['decode_tok_s']:>13.1f}")
    return "\n".join(lines)
