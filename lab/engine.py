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

import torch

from kvtier import KVCacheManager, KVPoolConfig
from liveserve.config.loader import LiveServeConfig
from liveserve.runtime import configure_torch
from stages.config import SamplingParams
from stages.engine import StageEngine
from stages.factory import build_model, decoder_of, runner_of
from stages.requests import ThinkerRequest, TurnInput
from stages.scheduler import Scheduler

PROMPT_LEN, OUTPUT_LEN = 128, 128
REPEATS = 5


def run_engine_bench(config: LiveServeConfig, batch_sizes: tuple[int, ...] = (1, 16, 64)) -> dict:
    configure_torch(config.runtime)
    spec = config.pipeline.thinker
    model = build_model(spec)
    results = {}
    for batch in batch_sizes:
        _timed_generation(spec, model, batch, max_tokens=2)
        t1 = statistics.median(_timed_generation(spec, model, batch, 1) for _ in range(REPEATS))
        t2 = statistics.median(_timed_generation(spec, model, batch, OUTPUT_LEN + 1) for _ in range(REPEATS))
        results[str(batch)] = {
            "prefill_tok_s": round(batch * PROMPT_LEN / t1, 1),
            "decode_tok_s": round(batch * OUTPUT_LEN / (t2 - t1), 1),
        }
    return {"engine": "liveserve", "torch_threads": config.runtime.torch_threads, "dtype": "float32",
            "prompt_len": PROMPT_LEN, "output_len": OUTPUT_LEN, "repeats": REPEATS, "results": results}


def _timed_generation(spec, model, batch: int, max_tokens: int) -> float:
    decoder = decoder_of(spec)
    needed = batch * -(-(PROMPT_LEN + max_tokens) // spec.kv.block_size)
    kv = KVCacheManager(KVPoolConfig(num_blocks=max(needed, spec.kv.num_blocks), block_size=spec.kv.block_size,
                                     num_layers=decoder.num_layers, num_kv_heads=decoder.num_kv_heads,
                                     head_dim=decoder.head_dim))
    runner = runner_of(spec, model, kv)
    engine = StageEngine("thinker", Scheduler(spec.scheduler, kv, time.monotonic), runner, lambda _: None)
    gen = torch.Generator().manual_seed(batch)
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    for i in range(batch):
        request = ThinkerRequest(f"r{i}", float(i), frozenset(), decoder.max_position)
        prompt = torch.randint(10, decoder.vocab_size, (PROMPT_LEN,), generator=gen).tolist()
        request.append(TurnInput(prompt, sampling=sampling), close=True)
        engine.scheduler.add(request)
    started = time.perf_counter()
    while engine.scheduler.requests:
        engine.step()
    return time.perf_counter() - started


def format_table(result: dict) -> str:
    lines = [f"{'batch':>6} {'prefill tok/s':>14} {'decode tok/s':>13}"]
    for batch, row in result["results"].items():
        lines.append(f"{batch:>6} {row['prefill_tok_s']:>14.1f} {row['decode_tok_s']:>13.1f}")
    return "\n".join(lines)
