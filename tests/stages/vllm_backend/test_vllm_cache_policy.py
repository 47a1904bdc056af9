"""LiveServe's next-use CachePolicy inside vLLM's own KV offload: its CPUOffloadingManager and its Scheduler with the
offloading connector, which load the policy by module path from the engine arguments LiveServe builds. The scenes
run in .venv-vllm's Python (vllm_offload_scenes.py; vLLM is not in this venv). Session b is needed farthest away
(a 30 s, b 90 s, c 60 s, d 10 s); a stored first, so it is the least recently used."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stages.vllm_backend.vllm_scenes import run_scenes

SCENES = Path(__file__).with_name("vllm_offload_scenes.py")


@pytest.fixture(scope="module")
def scenes() -> dict:
    return run_scenes(SCENES)


def test_vllms_manager_evicts_the_farthest_sessions_chunks_tail_first(scenes):
    assert scenes["manager"]["next_use"] == ["b1", "b0"]
    assert scenes["manager"]["lru"] == ["a1", "a0"]  # vLLM's own policy on the same accesses


def test_without_next_use_times_or_without_hints_the_policy_evicts_as_vllms_lru_does(scenes):
    assert scenes["manager"]["next_use_no_times"] == scenes["manager"]["lru"]
    assert scenes["manager"]["next_use_no_hints"] == scenes["manager"]["lru"]


def test_vllms_scheduler_built_from_liveserves_engine_arguments_runs_the_policy_fed_by_kv_hints(scenes):
    scene = scenes["scheduler"]
    assert scene["policy"] == "stages.vllm_backend.cache_policy.NextUseCachePolicy"
    assert scene["host_chunks"] == 8  # host_mib 1 of 128 KiB chunks
    before, after = scene["held"]
    assert before == {"a": 2, "b": 2, "c": 2, "d": 2, "e": 0}  # every session's chunks bound to it through its hints
    assert after == {"a": 2, "b": 0, "c": 2, "d": 2, "e": 2}  # e's two took b's place
