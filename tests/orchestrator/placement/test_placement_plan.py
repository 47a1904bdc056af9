"""The placement plan: GPUs per replica, memory per GPU against a hand count, and the plans it refuses."""

from __future__ import annotations

import pytest

from orchestrator.placement.deployment import GPUNode, StageDeployment
from orchestrator.placement.plan import PlanError, plan_placement
from stages.factory import num_parameters
from tests.orchestrator.conftest import tiny_pipeline

NODE = GPUNode(8, 141.0)
STAGES = ("encoder", "thinker", "talker", "vocoder")


def plan(node: GPUNode = NODE, **deployments: StageDeployment):
    specs = tiny_pipeline(num_blocks=256).stages
    every = {name: deployments.get(name, StageDeployment(name)) for name in STAGES}
    return plan_placement(specs, every, node)


def test_cpu_stages_get_one_row_per_replica_and_no_gpus():
    placements = plan(thinker=StageDeployment("thinker", replicas=3))
    assert [(p.stage, p.replica, p.gpus) for p in placements if p.stage == "thinker"] == [
        ("thinker", 0, ()), ("thinker", 1, ()), ("thinker", 2, ())]
    assert all(p.budget_bytes is None and p.free_bytes is None for p in placements)


def test_counted_gpus_come_from_those_nobody_lists():
    placements = plan(encoder=StageDeployment("encoder", devices=((0,),)),
                      thinker=StageDeployment("thinker", replicas=3, devices=2))
    assert [p.gpus for p in placements if p.stage == "thinker"] == [(1, 2), (3, 4), (5, 6)]


def test_memory_per_gpu_is_the_tensor_parallel_share_of_weights_and_kv():
    spec = tiny_pipeline(num_blocks=256).thinker
    placement = plan(thinker=StageDeployment("thinker", devices=((2, 3),), memory_fraction=0.5))[1]
    # 2 layers x 16 head_dim x 2 (K and V) x 2 bytes (bf16), 2 KV heads split over 2 GPUs: 1 a GPU
    per_token = 2 * 16 * 2 * 2 * 1
    assert placement.kv_tokens == 256 * 16 and placement.kv_bytes == 256 * 16 * per_token
    assert placement.weights_bytes == num_parameters(spec) * 2 / 2
    assert placement.budget_bytes == 0.5 * 141e9
    assert placement.host_tier_bytes == 0  # kv.eviction none: no host tier
    assert placement.free_bytes == pytest.approx(0.5 * 141e9 - placement.weights_bytes - placement.kv_bytes)


def test_replicas_may_share_a_gpu_within_their_fractions():
    placements = plan(thinker=StageDeployment("thinker", replicas=2, devices=((0,), (0,)), memory_fraction=0.5),
                      vocoder=StageDeployment("vocoder", devices=((1,),)))
    assert [p.gpus for p in placements if p.stage in ("thinker", "vocoder")] == [(0,), (0,), (1,)]


@pytest.mark.parametrize("deployments, field, message", [
    ({"thinker": StageDeployment("thinker", devices=((8,),))}, "devices", "GPU 8 is not on the node, which has 8"),
    ({"thinker": StageDeployment("thinker", replicas=5, devices=2)}, "devices", "need 10 GPUs; 8 of the node's"),
    ({"thinker": StageDeployment("thinker", devices=((0,),)), "talker": StageDeployment("talker", devices=((0,),))},
     "memory_fraction", "GPU 0 is shared by thinker[0] and talker[0]"),
    ({"thinker": StageDeployment("thinker", devices=((0,),), memory_fraction=0.7),
      "talker": StageDeployment("talker", devices=((0,),), memory_fraction=0.4)},
     "memory_fraction", "add up to 1.1, over 1"),
    ({"thinker": StageDeployment("thinker", devices=((0, 1, 2),))}, "tensor_parallel_size", "3 does not divide"),
])
def test_impossible_plans_name_the_field(deployments, field, message):
    with pytest.raises(PlanError, match=message.replace("[", r"\[").replace("]", r"\]")) as caught:
        plan(**deployments)
    assert caught.value.field == field


def test_weights_and_kv_over_the_budget_are_refused():
    small = GPUNode(2, 0.0002)  # 200 kB a GPU: the thinker's weights alone take more
    with pytest.raises(PlanError, match="weights take .* a GPU, over its") as caught:
        plan(small, thinker=StageDeployment("thinker", devices=1))
    assert caught.value.field == "devices"
    fits_weights = GPUNode(2, num_parameters(tiny_pipeline().thinker) * 2 * 1.01 / 1e9)
    with pytest.raises(PlanError, match=r"replica 0 needs .* \(weights .* \+ KV .*\), over its") as caught:
        plan(fits_weights, thinker=StageDeployment("thinker", devices=1))
    assert caught.value.field == "kv.num_blocks"


@pytest.mark.parametrize("kwargs, message", [
    ({"devices": ((0, 1),), "replicas": 2}, "devices lists the GPUs of 1 replicas, replicas is 2"),
    ({"devices": ((0, 0),)}, r"devices\[0\] must be distinct GPU indices"),
    ({"devices": ((0, 1), (2,)), "replicas": 2}, r"devices\[1\] has 1 GPUs, devices\[0\] 2"),
    ({"devices": 2, "tensor_parallel_size": 4}, "tensor_parallel_size 4 must equal each replica's GPUs"),
    ({"devices": 1, "memory_fraction": 1.5}, r"memory_fraction must be a number in \(0, 1\]"),
    ({"devices": 1, "dtype": "int3"}, "dtype must be one of"),
])
def test_a_deployment_checks_itself(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StageDeployment("thinker", **kwargs)


def test_gpus_are_written_count_x_size():
    assert GPUNode.parse("8x141GB") == NODE and str(NODE) == "8x141GB"
    with pytest.raises(ValueError, match="expected COUNTxSIZEGB"):
        GPUNode.parse("8 H200")
