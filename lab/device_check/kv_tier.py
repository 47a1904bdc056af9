"""Section `kv_tier`: the device <-> host link through kvtier's BlockCopier (on a GPU, its CudaLink: a side stream and
pinned staging), with blocks of the full Qwen3-Omni thinker; and whether a preload overlaps decoding.

Bandwidth: copies of each of `block_counts` blocks each way, best of `repeats`, in GB/s, next to the simulator's
host link. Overlap: `num_steps` decode steps of a thinker of `engine_depth` layers at `batch` requests, timed alone
(before and after) and while a TransferWorker (thread mode, chunks of `chunk_blocks`) loads blocks sized to take
about as long as the steps alone (at most the caches' `cache_blocks`: `load_covers_steps` says whether it lasted
as long as they did); and that load's time alone and during them. The steps overlap the load when their time grows
by at most `tolerance` and the load still finishes.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import threading
import time
from dataclasses import dataclass

import torch

from kvtier import KVPoolConfig
from kvtier.block_copier import BlockCopier
from kvtier.kv_cache import KVCache
from kvtier.transfer_job import LOAD, STORE, TransferJob
from kvtier.transfer_worker import TransferWorker
from lab.device_check.deadline import Deadline
from lab.device_check.sections import Section, run_section
from lab.device_check.thinker import ThinkerRunners, build_thinker, generation, thinker_config
from lab.engine import new_engine
from lab.sim.cost_model import H200
from stages.engine import StageEngine


@dataclass(frozen=True)
class KVTierPlan:
    """Caches of `cache_blocks` blocks of the full thinker of `source` on `device` and in (pinned) host memory, in
    `dtype`; the rest as the module says. The overlap starts only if `overlap_min_s` is left. `threads`: torch's
    intra-op threads while it measures (None: as they are)."""

    device: str
    dtype: str
    source: str
    block_counts: tuple[int, ...]
    repeats: int
    engine_depth: int
    batch: int
    prompt_len: int
    num_steps: int
    cache_blocks: int
    chunk_blocks: int = 16
    tolerance: float = 0.1
    overlap_min_s: float = 10.0
    threads: int | None = None


ON_GPU = KVTierPlan("cuda", "bfloat16", "qwen3-omni-h200", (16, 64, 256), 5, 2, 64, 128, 64, 1024)
DRY_RUN = KVTierPlan("cpu", "float32", "qwen3-omni-tiny-cpu", (4, 16), 2, 1, 2, 16, 8, 64, overlap_min_s=1.0,
                     threads=1)


def run_kv_tier(plan: KVTierPlan, deadline: Deadline) -> dict:
    config = thinker_config(plan.source)
    if plan.threads is not None:
        torch.set_num_threads(plan.threads)
    pool = KVPoolConfig(num_blocks=plan.cache_blocks, num_layers=config.num_layers, num_kv_heads=config.num_kv_heads,
                        head_dim=config.head_dim, dtype=plan.dtype, device=plan.device)
    host = KVCache(dataclasses.replace(pool, device="cpu"), pin_memory=plan.device.startswith("cuda"))
    copier = BlockCopier(KVCache(pool), host, gbps=None)
    bandwidth = [_bandwidth(copier, count, plan.repeats) for count in plan.block_counts]
    overlap = run_section(Section("overlap", lambda _: measure_overlap(plan, copier, bandwidth[-1]["load_gbytes_s"]),
                                  plan.overlap_min_s), deadline)
    block = (f"K and V x {config.num_layers} layers x {pool.block_size} tokens x {config.num_kv_heads} KV heads x "
             f"{config.head_dim} in {plan.dtype}")
    return {"device": plan.device, "dtype": plan.dtype, "block": block,
            "bytes_per_block": pool.bytes_per_block, "pinned_host": host.keys[0].is_pinned(),
            "torch_threads": torch.get_num_threads(),
            "simulated_link_gbytes_s": H200.host_link_gbytes_per_s, "bandwidth": bandwidth, "overlap": overlap}


def _bandwidth(copier: BlockCopier, count: int, repeats: int) -> dict:
    ids = list(range(count))
    num_bytes = count * copier.bytes_per_block
    store = min(copier.copy(STORE, ids, ids) for _ in range(repeats))
    load = min(copier.copy(LOAD, ids, ids) for _ in range(repeats))
    return {"blocks": count, "mbytes": round(num_bytes / 1e6, 1), "store_gbytes_s": _gbytes_s(num_bytes, store),
            "load_gbytes_s": _gbytes_s(num_bytes, load)}


def _gbytes_s(num_bytes: int, seconds: float) -> float:
    return float(f"{num_bytes / seconds / 1e9:.4g}")


def measure_overlap(plan: KVTierPlan, copier: BlockCopier, load_gbytes_s: float) -> dict:
    engine = _decoding_engine(plan)
    before = _timed_steps(engine, plan.num_steps)
    blocks = min(plan.cache_blocks, max(plan.chunk_blocks, math.ceil(
        before * load_gbytes_s * 1e9 / copier.bytes_per_block)))
    load_alone = _timed_load(copier, plan.chunk_blocks, blocks)
    worker, finished = _load(copier, plan.chunk_blocks, blocks)
    during = _timed_steps(engine, plan.num_steps)
    done = finished.wait(timeout=max(60.0, 10 * load_alone))
    worker.close()
    after = _timed_steps(engine, plan.num_steps)
    alone = statistics.mean([before, after])
    return {"engine": f"thinker of {plan.engine_depth} layers, {plan.batch} requests decoding", "steps": plan.num_steps,
            "load_blocks": blocks, "steps_alone_s": round(alone, 4), "steps_during_load_s": round(during, 4),
            "load_alone_s": round(load_alone, 4), "load_during_steps_s": round(finished.seconds, 4) if done else None,
            "step_slowdown": round(during / alone, 3), "load_finished": done,
            "load_covers_steps": done and finished.seconds >= during,
            "overlaps": done and during <= (1 + plan.tolerance) * alone}


def _decoding_engine(plan: KVTierPlan) -> StageEngine:
    """The thinker's engine with `batch` requests past their prompts (every step a decode of each), each with
    tokens left for three runs of steps."""
    model = build_thinker(thinker_config(plan.source), plan.engine_depth, plan.device, plan.dtype)
    runners = ThinkerRunners(model, plan.device)
    gen = generation(runners, plan.dtype, plan.prompt_len, plan.batch, plan.batch * plan.prompt_len)
    engine = new_engine(gen, plan.batch, 3 * plan.num_steps + 8)
    while not runners.last.steps or len(runners.last.steps[-1]) < plan.batch or any(
            chunk.num_tokens > 1 for chunk in runners.last.steps[-1]):
        engine.step()
    _timed_steps(engine, 1)
    return engine


def _timed_steps(engine: StageEngine, num_steps: int) -> float:
    started = time.perf_counter()
    for _ in range(num_steps):
        engine.step()
    return time.perf_counter() - started


class LoadFinished(threading.Event):
    """Set when the worker has finished its job; `seconds` from the job's submission."""

    def __init__(self) -> None:
        super().__init__()
        self.started = time.perf_counter()
        self.seconds = math.nan

    def __call__(self) -> None:
        self.seconds = time.perf_counter() - self.started
        self.set()


def _load(copier: BlockCopier, chunk_blocks: int, num_blocks: int) -> tuple[TransferWorker, LoadFinished]:
    """A background load of blocks 0..num_blocks-1 from the host, submitted to a worker thread of its own."""
    finished = LoadFinished()
    worker = TransferWorker(copier, chunk_blocks, "thread", on_finished=finished)
    ids = list(range(num_blocks))
    worker.submit(TransferJob("preload", LOAD, background=True, src_ids=ids, dst_ids=ids, first_block=0))
    return worker, finished


def _timed_load(copier: BlockCopier, chunk_blocks: int, num_blocks: int) -> float:
    worker, finished = _load(copier, chunk_blocks, num_blocks)
    finished.wait()
    worker.close()
    return finished.seconds
