"""LiveServe's policies ordering vLLM's queues (stages/vllm_backend/step_order.py), on stand-ins for vLLM's
requests: keyed by LiveServe's request id, running ones most urgent first (vLLM preempts the last), held and
yielding ones left out of the step. The same ordering on vLLM's real Scheduler: test_vllm_scheduler.py."""

from __future__ import annotations

from dataclasses import dataclass

from stages.config import SchedulerConfig
from stages.policies import make_policy
from stages.policies.urgency import UrgencyParams
from stages.vllm_backend.step_order import order_step
from tests.stages.test_urgency_policy import NOT_STARTED, FakeView, playing


@dataclass(frozen=True)
class VllmRequest:
    """What the scheduler would hand over: vLLM's id (a random suffix on LiveServe's), and what describes it."""

    vllm_id: str
    owner: str
    arrival_time: float
    num_pending: int


def describe(request: VllmRequest) -> tuple[str, float, int]:
    return request.owner, request.arrival_time, request.num_pending


def vllm(owner: str, arrival: float, num_pending: int = 1) -> VllmRequest:
    return VllmRequest(f"{owner}#1-5f0c9a1e", owner, arrival, num_pending)


def owners(requests) -> list[str]:
    return [r.owner for r in requests]


def urgency(**states):
    return make_policy(SchedulerConfig(policy="urgency", params=UrgencyParams()), FakeView(**states))


def test_running_requests_go_most_urgent_first_by_their_liveserve_ids_telemetry():
    policy = urgency(low=playing(100), ahead=playing(900), first=NOT_STARTED)
    running = [vllm("ahead", 1.0), vllm("first", 2.0), vllm("low", 3.0)]  # vLLM's order: arrival
    order = order_step(policy, running, [], describe, now=10.0)
    assert owners(order.running) == ["low", "first", "ahead"]  # U0, U1, then U2: the last is preempted first
    assert order.held_running == order.held_waiting == []


def test_waiting_requests_are_rekeyed_and_a_new_turn_waiting_for_first_audio_goes_first():
    policy = urgency(resumed=playing(800), new=NOT_STARTED, older_new=NOT_STARTED)
    waiting = [vllm("resumed", 1.0), vllm("new", 5.0), vllm("older_new", 4.0)]
    order = order_step(policy, [], waiting, describe, now=10.0)
    assert owners(order.waiting) == ["older_new", "new", "resumed"]  # U1 longest ready first, then U2


def test_new_turns_waiting_together_go_least_prefill_first():
    policy = urgency(long=NOT_STARTED, short=NOT_STARTED)
    order = order_step(policy, [], [vllm("long", 5.0, num_pending=900), vllm("short", 5.0, num_pending=20)],
                       describe, now=10.0)
    assert owners(order.waiting) == ["short", "long"]


def test_held_and_yielding_requests_sit_the_step_out_in_their_queues():
    policy = urgency(far=playing(2500), ahead=playing(1500), near=playing(600), new=NOT_STARTED, preempted=playing(3000))
    running = [vllm("far", 1.0), vllm("ahead", 2.0), vllm("near", 3.0)]
    waiting = [vllm("preempted", 0.5), vllm("new", 6.0)]
    order = order_step(policy, running, waiting, describe, now=10.0)
    assert owners(order.running) == ["near"]  # under p_yield: keeps decoding beside the new turn
    assert owners(order.waiting) == ["new"]
    assert owners(order.held_running) == ["far", "ahead"]  # past p_max: held; past p_yield, a listener waits: yields
    assert owners(order.held_waiting) == ["preempted"]


def test_without_a_waiting_listener_work_ahead_of_its_listener_is_served():
    policy = urgency(ahead=playing(1500), near=playing(600))
    order = order_step(policy, [vllm("ahead", 1.0), vllm("near", 2.0)], [], describe, now=10.0)
    assert owners(order.running) == ["near", "ahead"] and order.held_running == []


def test_fcfs_through_the_same_seam_keeps_running_then_waiting_each_by_arrival():
    policy = make_policy(SchedulerConfig(policy="fcfs"))
    order = order_step(policy, [vllm("b", 2.0), vllm("a", 1.0)], [vllm("d", 4.0), vllm("c", 3.0)], describe, now=10.0)
    assert (owners(order.running), owners(order.waiting)) == (["a", "b"], ["c", "d"])
