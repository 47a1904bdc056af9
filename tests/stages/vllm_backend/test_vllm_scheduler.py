"""LiveServe's urgency policy inside vLLM's real Scheduler (vllm_api.OrderedScheduler), against vLLM's own fcfs on the
same scenes: the scenes run in .venv-vllm's Python (vllm_scheduler_scenes.py; vLLM is not in this venv), keyed by
LiveServe's request ids while vLLM's own carry a suffix. Each list below is one step's, by LiveServe id."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stages.vllm_backend.vllm_scenes import run_scenes

SCENES = Path(__file__).with_name("vllm_scheduler_scenes.py")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scenes() -> dict:
    return run_scenes(SCENES)


def steps(scenes, scene, policy, what) -> list[list[str]]:
    return [sorted(s[what]) if what == "scheduled" else s[what] for s in scenes[scene][policy]]


def test_under_kv_pressure_vllm_preempts_the_least_urgent_reply_not_the_newest(scenes):
    # ahead: 900 ms buffered; first: no audio yet; low: 100 ms left, arrived last. One block short at the first decode.
    assert steps(scenes, "preemption", "fcfs", "preempted") == [[], ["low"]]  # vLLM's own: the last arrival
    assert steps(scenes, "preemption", "urgency", "preempted") == [[], ["ahead"]]
    assert steps(scenes, "preemption", "urgency", "running")[0] == ["low", "first", "ahead"]  # U0, U1, U2


def test_a_reply_far_ahead_of_its_listener_is_held_out_of_the_step_keeping_its_kv(scenes):
    assert steps(scenes, "hold", "fcfs", "scheduled")[1:] == [["far", "near", "new"]] * 2
    assert steps(scenes, "hold", "urgency", "scheduled") == [["far", "near"], ["near", "new"], ["near", "new"]]
    assert all(running[-1] == "far" for running in steps(scenes, "hold", "urgency", "running")[1:])  # admitted, last


def test_a_held_reply_keeps_its_batch_slot(scenes):
    # max_num_seqs 2: "new" waits in both; under urgency the slot it would need is the held reply's.
    assert steps(scenes, "held_slot", "urgency", "scheduled")[1] == ["near"]
    assert steps(scenes, "held_slot", "urgency", "running")[1] == ["near", "far"]
    assert steps(scenes, "held_slot", "fcfs", "scheduled")[1] == ["far", "near"]


def test_work_ahead_yields_while_a_new_turn_waits_for_first_audio_and_resumes_once_it_plays(scenes):
    assert steps(scenes, "yielding", "urgency", "scheduled") == [
        ["ahead", "near"],  # nobody waits: 1500 ms ahead still decodes
        ["near", "new"], ["near", "new"],  # a new turn has no audio yet: "ahead" (past p_yield) sits out
        ["ahead", "near", "new"],  # it plays: nobody waits
    ]
    assert steps(scenes, "yielding", "fcfs", "scheduled")[1:] == [["ahead", "near", "new"]] * 3


def test_the_waiting_queue_is_rekeyed_so_a_new_turn_is_admitted_before_a_reply_already_playing(scenes):
    assert steps(scenes, "waiting_order", "fcfs", "scheduled") == [["resumed"]]
    assert steps(scenes, "waiting_order", "urgency", "scheduled") == [["new"]]


def test_the_scheduler_records_each_step_as_it_was_scheduled_and_counts_preemptions(scenes):
    for scene in scenes.values():
        for policy_steps in scene.values():
            assert [s["recorded"] for s in policy_steps] == [[s["scheduled"], s["preempted"]] for s in policy_steps]
    assert [s["num_preemptions"] for s in scenes["preemption"]["fcfs"]] == [0, 1]
    assert [s["num_preemptions"] for s in scenes["preemption"]["urgency"]] == [0, 1]


def test_among_replies_equally_ahead_the_one_holding_more_of_vllms_pool_goes_first(scenes):
    # U2's KV-pressure term, read from vLLM's block pool: "big" holds 3 blocks, "small" 1.
    assert steps(scenes, "pool_pressure_order", "urgency", "running")[1] == ["big", "small"]
    assert steps(scenes, "pool_pressure_order", "fcfs", "running")[1] == ["small", "big"]


def test_past_pace_kv_share_of_vllms_pool_a_reply_far_ahead_is_not_held(scenes):
    # Paced replies keep their KV active: once the pool is fuller than pace_kv_share, replies run to the end.
    assert steps(scenes, "hold_in_a_full_pool", "urgency", "scheduled")[1] == ["far", "near"]
    assert steps(scenes, "hold", "urgency", "scheduled")[1] == ["near", "new"]  # the same reply held in a roomy pool
