"""Where each stage replica goes in a Ray cluster, decided without Ray: which of the config's nodes (its GPUs
are numbered node after node), which bundle of that node's placement group, what share of a GPU Ray accounts
for it, and the GPUs it sees."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.placement.deployment import GPUNode, StageDeployment
from orchestrator.placement.plan import PlanError, replica_gpus
from orchestrator.placement.replicated import replica_names

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class RaySettings:
    """`address`: a running Ray cluster to join (`host:port`, or `auto`); None starts a Ray instance for the
    server on this machine, with `num_cpus` and `num_gpus` (None: what Ray detects; logical GPUs are fine).
    `node_ip_address`: this machine's address in the cluster; the default keeps every Ray socket on
    loopback, which a cluster of several machines replaces with the node's own address."""

    address: str | None = None
    node_ip_address: str = LOOPBACK
    num_cpus: int | None = None
    num_gpus: int | None = None

    def __post_init__(self) -> None:
        for name in ("num_cpus", "num_gpus"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
            if value is not None and self.address is not None:
                raise ValueError(f"{name} sizes a Ray instance started here; a cluster joined at address "
                                 "has its own")


@dataclass(frozen=True)
class ReplicaSlot:
    """One replica's place. On GPUs: `node` (the config's node), `bundle` (the bundle of its first GPU in
    that node's placement group, which holds every GPU of the node), `num_gpus` (the share of that GPU Ray
    accounts for: its memory fraction, else all of it) and `gpus` (the node's GPUs it uses, its
    CUDA_VISIBLE_DEVICES). On the CPU: `node` None, and it runs on the server's machine."""

    node: int | None = None
    bundle: int = 0
    num_gpus: float = 0.0
    gpus: tuple[int, ...] = ()

    @property
    def cuda_visible_devices(self) -> str:
        return ",".join(map(str, self.gpus))

    @property
    def devices(self) -> tuple[tuple[int | None, int | None], ...]:
        """The physical devices it computes on, as (node, GPU): each of its GPUs, or (None, None) for the CPU
        of the server's machine."""
        return tuple((self.node, gpu) for gpu in self.gpus) or ((None, None),)


def lay_out(deployments: Sequence[StageDeployment], gpus_per_node: int, num_nodes: int) -> dict[str, ReplicaSlot]:
    """Every replica's slot, by its name (`<stage>`, or `<stage>-<i>` for several), on `num_nodes` nodes of
    `gpus_per_node` GPUs; a PlanError naming the field for what cannot be placed."""
    gpus = replica_gpus(deployments, GPUNode(gpus_per_node * num_nodes, 1.0))
    return {name: _slot(deployment, name, gpus[name], gpus_per_node) if gpus[name] else ReplicaSlot()
            for deployment in deployments for name in replica_names(deployment.stage, deployment.replicas)}


def _slot(deployment: StageDeployment, name: str, devices: tuple[int, ...], gpus_per_node: int) -> ReplicaSlot:
    nodes = {gpu // gpus_per_node for gpu in devices}
    if len(nodes) > 1:
        raise PlanError(deployment.stage, "devices", f"replica {name}'s GPUs {list(devices)} span nodes of "
                        f"{gpus_per_node} GPUs; a replica's GPUs are on one node")
    local = tuple(gpu % gpus_per_node for gpu in devices)
    return ReplicaSlot(nodes.pop(), local[0], deployment.memory_fraction or 1.0, local)
