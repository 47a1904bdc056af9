"""Where Ray placement puts each replica, decided without Ray: nodes, bundles, GPU shares, visible GPUs."""

from __future__ import annotations

import re

import pytest

from orchestrator.placement.deployment import StageDeployment
from orchestrator.placement.plan import PlanError
from orchestrator.placement.ray_layout import RaySettings, ReplicaSlot, lay_out


def test_replicas_go_to_the_bundle_of_their_first_gpu_on_the_node_that_holds_it():
    slots = lay_out((StageDeployment("encoder"),
                     StageDeployment("thinker", replicas=2, devices=((0, 1), (4, 5))),
                     StageDeployment("talker", replicas=2, devices=1)), gpus_per_node=4, num_nodes=2)
    assert slots["encoder"] == ReplicaSlot()  # on the CPU: the server's node
    assert slots["thinker-0"] == ReplicaSlot(node=0, bundle=0, num_gpus=1.0, gpus=(0, 1))
    assert slots["thinker-1"] == ReplicaSlot(node=1, bundle=0, num_gpus=1.0, gpus=(0, 1))  # GPUs 4, 5: node 1
    assert [slots[f"talker-{i}"].gpus for i in range(2)] == [(2,), (3,)]  # counted: the lowest nobody lists
    assert slots["thinker-1"].cuda_visible_devices == "0,1"


def test_stages_sharing_a_gpu_take_their_memory_fractions_of_it():
    slots = lay_out((StageDeployment("thinker", devices=((1,),), memory_fraction=0.6),
                     StageDeployment("talker", devices=((1,),), memory_fraction=0.4)), gpus_per_node=4, num_nodes=1)
    assert (slots["thinker"].bundle, slots["thinker"].num_gpus) == (1, 0.6)
    assert (slots["talker"].bundle, slots["talker"].num_gpus) == (1, 0.4)


@pytest.mark.parametrize("deployments, field, message", [
    ((StageDeployment("thinker", devices=((3, 4),)),), "devices", "span nodes of 4 GPUs"),
    ((StageDeployment("thinker", devices=((8,),)),), "devices", "GPU 8 is not on the node"),
    ((StageDeployment("thinker", devices=((1,),)), StageDeployment("talker", devices=((1,),))),
     "memory_fraction", "GPU 1 is shared by thinker[0] and talker[0]"),
])
def test_what_cannot_be_placed_is_refused_naming_the_field(deployments, field, message):
    with pytest.raises(PlanError, match=re.escape(message)) as refused:
        lay_out(deployments, gpus_per_node=4, num_nodes=2)
    assert refused.value.field == field


def test_a_cluster_joined_by_address_is_not_sized_here():
    with pytest.raises(ValueError, match="num_gpus sizes a Ray instance started here"):
        RaySettings(address="auto", num_gpus=4)
    assert RaySettings().node_ip_address == "127.0.0.1"
