"""The urgency policy's device board is per physical device: replicas spanning several GPUs report to and read
the board of each, so stages sharing any GPU yield to each other's waiting listeners (control plane only: the
layout, the boards as plain lists, real urgency policies over fake playback)."""

from __future__ import annotations

from orchestrator.placement.deployment import StageDeployment
from orchestrator.placement.device_boards import seat_boards
from orchestrator.placement.ray_layout import lay_out
from stages.config import SamplingParams, SchedulerConfig
from stages.interaction import InteractionView, PlaybackState
from stages.policies import make_policy
from stages.requests import TurnInput
from stages.requests.thinker import ThinkerRequest
from stages.shared_device import SharedDevice

NOT_STARTED = PlaybackState(started=False, drained_at=0.0)
FAR_AHEAD = PlaybackState(started=True, drained_at=0.0, queued_ms=1500.0)  # over p_yield, under p_max


class FakeView(InteractionView):
    def __init__(self, **states: PlaybackState) -> None:
        self.states = states

    def playback(self, request_id: str) -> PlaybackState | None:
        return self.states.get(request_id)


VIEW = FakeView(new=NOT_STARTED, far=FAR_AHEAD)


def ready(rid: str) -> ThinkerRequest:
    request = ThinkerRequest(rid, 0.0, stop_ids=frozenset(), max_position=100)
    request.append(TurnInput([1, 2, 3], sampling=SamplingParams(temperature=0.0, max_tokens=1)), close=True)
    request.ready_since = 0.0
    return request


def policies(*deployments: StageDeployment) -> dict:
    """An urgency policy per replica, each on the boards the layout's devices give it (lists for shared memory)."""
    slots = lay_out(deployments, gpus_per_node=4, num_nodes=1)
    boards = seat_boards({name: slot.devices for name, slot in slots.items()}, lambda size: [False] * size)
    return {name: make_policy(SchedulerConfig(policy="urgency"), VIEW, None, SharedDevice.spanning(seats))
            for name, seats in boards.items()}


def yields_to(waiting, other) -> bool:
    """Whether `other` holds back its far-ahead work while `waiting` has a listener waiting for first audio."""
    waiting.order([ready("new")], now=0.0)
    held_back = other.order([ready("far")], now=0.0) == []
    waiting.order([], now=0.0)  # its listener is served
    assert [r.request_id for r in other.order([ready("far")], now=0.0)] == ["far"]
    return held_back


def test_replicas_sharing_only_their_second_gpu_yield_to_each_other_and_disjoint_gpus_do_not():
    by_name = policies(StageDeployment("thinker", devices=((0, 1),), memory_fraction=0.5),
                       StageDeployment("talker", devices=((2, 1),), memory_fraction=0.5),
                       StageDeployment("vocoder", devices=((3,),)))
    thinker, talker, vocoder = by_name["thinker"], by_name["talker"], by_name["vocoder"]
    assert yields_to(thinker, talker) and yields_to(talker, thinker)  # GPU 1, second of both
    assert not yields_to(thinker, vocoder) and not yields_to(vocoder, thinker)  # GPUs 0, 1 and GPU 3
    assert not yields_to(talker, vocoder)


def test_tensor_parallel_replicas_of_one_stage_on_disjoint_gpus_do_not_yield_to_each_other():
    by_name = policies(StageDeployment("thinker", replicas=2, devices=2))  # GPUs 0, 1 and GPUs 2, 3
    assert not yields_to(by_name["thinker-0"], by_name["thinker-1"])


def test_stages_on_the_cpu_share_one_board():
    by_name = policies(StageDeployment("encoder"), StageDeployment("thinker", replicas=2),
                       StageDeployment("talker", devices=((0,),)))
    assert yields_to(by_name["thinker-1"], by_name["encoder"]) and yields_to(by_name["encoder"], by_name["thinker-0"])
    assert not yields_to(by_name["talker"], by_name["encoder"])  # on GPU 0, not the CPU


def test_a_board_has_a_slot_for_each_replica_computing_on_its_device():
    boards = seat_boards({"a": ("cpu",), "b": ("gpu0", "gpu1"), "c": ("gpu1",)}, lambda size: [False] * size)
    assert [(len(slots), slot) for slots, slot in boards["b"]] == [(1, 0), (2, 0)]
    assert boards["c"][0][0] is boards["b"][1][0] and boards["c"][0][1] == 1
