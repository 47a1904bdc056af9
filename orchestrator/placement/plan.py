"""Where each stage replica goes on a GPU node, and what memory it takes there: weights, KV, host tier.

A replica on GPUs holds a 1/tensor_parallel_size share of its weights and of its KV pool on each of
them (KV heads are replicated when there are fewer than GPUs, as vLLM does); its host tier lives in
the node's RAM. A thinker on vLLM has no KV pool of LiveServe's: on GPUs vLLM's KV takes what the weights
leave of its memory fraction, which the plan counts as its KV. The plan refuses what cannot run: GPUs the
node has not got, replicas sharing a GPU without memory fractions or over a whole GPU between them, a
tensor parallel size the heads do not divide by, weights and KV over a replica's share of its GPUs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.placement.deployment import GPUNode, StageDeployment
from orchestrator.placement.replicated import replica_names
from stages.factory import decoder_of, num_parameters
from stages.stage_spec import StageSpec


class PlanError(ValueError):
    """A plan that cannot run; `field` is the stage's key to change (e.g. `devices`)."""

    def __init__(self, stage: str, field: str, message: str) -> None:
        super().__init__(message)
        self.stage, self.field = stage, field


@dataclass(frozen=True)
class ReplicaPlacement:
    """One replica: its node and GPUs (none: the CPU), and bytes a GPU (on the CPU: in all) of weights
    (None: unknown, a packaged model), of KV and of the share of memory it may use (None: the CPU)."""

    stage: str
    replica: int
    node: int
    gpus: tuple[int, ...]
    weights_bytes: float | None
    kv_bytes: float
    budget_bytes: float | None
    kv_tokens: int
    host_tier_bytes: float

    @property
    def free_bytes(self) -> float | None:
        if self.budget_bytes is None or self.weights_bytes is None:
            return None
        return self.budget_bytes - self.weights_bytes - self.kv_bytes


def plan_placement(specs: tuple[StageSpec, ...], deployments: Mapping[str, StageDeployment],
                   node: GPUNode) -> tuple[ReplicaPlacement, ...]:
    """Every replica of every stage in `specs` (one node: node 0), or a PlanError naming the first problem."""
    gpus = assign_gpus([spec.name for spec in specs], deployments, node)
    check_sharing(gpus, deployments)
    parameters = {spec.name: num_parameters(spec) for spec in specs}  # once a stage: a model built on meta
    return tuple(_place(spec, parameters[spec.name], deployments[spec.name], replica, devices, node)
                 for spec in specs for replica, devices in enumerate(gpus[spec.name]))


def replica_gpus(deployments: Sequence[StageDeployment], node: GPUNode) -> dict[str, tuple[int, ...]]:
    """Each replica's GPUs on `node`, by the name it runs under (`<stage>`, or `<stage>-<i>` of several), numbered
    as the plan numbers them; () for a replica on the CPU. A PlanError naming the field for what cannot run."""
    by_stage = {deployment.stage: deployment for deployment in deployments}
    gpus = assign_gpus(list(by_stage), by_stage, node)
    check_sharing(gpus, by_stage)
    return {name: devices for stage, replicas in gpus.items()
            for name, devices in zip(replica_names(stage, len(replicas)), replicas)}


def assign_gpus(stages: Sequence[str], deployments: Mapping[str, StageDeployment],
                node: GPUNode) -> dict[str, list[tuple[int, ...]]]:
    """Each replica's GPUs by stage: listed ones as given, counted ones from the lowest GPUs nobody lists."""
    listed = {gpu for stage in stages if isinstance(lists := deployments[stage].devices, tuple)
              for gpus in lists for gpu in gpus}
    free = [gpu for gpu in range(node.num_gpus) if gpu not in listed]
    assigned = {}
    for stage in stages:
        deployment = deployments[stage]
        if deployment.devices is None:
            assigned[stage] = [()] * deployment.replicas
        elif isinstance(deployment.devices, tuple):
            for gpus in deployment.devices:
                if max(gpus) >= node.num_gpus:
                    raise PlanError(stage, "devices", f"GPU {max(gpus)} is not on the node, which has "
                                    f"{_gpu_count(node)}")
            assigned[stage] = list(deployment.devices)
        else:
            need = deployment.replicas * deployment.devices
            if need > len(free):
                raise PlanError(stage, "devices", f"{deployment.replicas} replicas x {deployment.devices} GPUs "
                                f"need {need} GPUs; {len(free)} of the node's {_gpu_count(node)} are not taken")
            taken, free = free[:need], free[need:]
            assigned[stage] = [tuple(taken[i:i + deployment.devices]) for i in range(0, need, deployment.devices)]
    return assigned


def _gpu_count(node: GPUNode) -> str:
    return "no GPUs (give --gpus)" if node.num_gpus == 0 else f"{node.num_gpus} (0-{node.num_gpus - 1})"


def check_sharing(gpus: dict[str, list[tuple[int, ...]]], deployments: Mapping[str, StageDeployment]) -> None:
    """Replicas sharing a GPU each need a memory fraction, and the fractions fit in one GPU."""
    users = defaultdict(list)
    for stage, replicas in gpus.items():
        for replica, devices in enumerate(replicas):
            for gpu in devices:
                users[gpu].append((stage, replica))
    for gpu, sharing in sorted(users.items()):
        if len(sharing) < 2:
            continue
        names = " and ".join(f"{stage}[{replica}]" for stage, replica in sharing)
        for stage, _ in sharing:
            if deployments[stage].memory_fraction is None:
                raise PlanError(stage, "memory_fraction", f"GPU {gpu} is shared by {names}: give each of "
                                "their stages a memory_fraction (together at most 1)")
        total = sum(deployments[stage].memory_fraction for stage, _ in sharing)
        if total > 1 + 1e-9:
            raise PlanError(sharing[-1][0], "memory_fraction", f"GPU {gpu} is shared by {names}, whose "
                            f"memory fractions add up to {total:g}, over 1")


def _place(spec: StageSpec, parameters: int | None, deployment: StageDeployment, replica: int,
           gpus: tuple[int, ...], node: GPUNode) -> ReplicaPlacement:
    split = max(1, len(gpus))
    weights = None if parameters is None else parameters * deployment.element_bytes / split
    kv_tokens, kv_bytes, host_bytes = _kv(spec, deployment, split)
    budget = None
    if gpus:
        _check_heads(spec, split)
        budget = (deployment.memory_fraction or 1.0) * node.memory_bytes
        _check_fit(spec, replica, weights, kv_bytes, budget, deployment)
        if spec.backend == "vllm" and weights is not None:
            kv_tokens, kv_bytes = _left_for_kv(spec, deployment, split, budget - weights)
    return ReplicaPlacement(spec.name, replica, 0, gpus, weights, kv_bytes, budget, kv_tokens, host_bytes)


def _kv(spec: StageSpec, deployment: StageDeployment, split: int) -> tuple[int, float, float]:
    """Tokens the replica's KV pool holds, its bytes on each GPU, and the host tier's bytes in all."""
    if spec.kv is None:
        return 0, 0.0, 0.0
    decoder = decoder_of(spec)
    heads_per_gpu = -(-decoder.num_kv_heads // split)
    per_token = 2 * decoder.num_layers * decoder.head_dim * deployment.element_bytes
    tokens = spec.kv.num_blocks * spec.kv.block_size
    host = spec.kv.host.num_blocks * spec.kv.block_size if spec.kv.host is not None else 0
    return tokens, tokens * per_token * heads_per_gpu, host * per_token * decoder.num_kv_heads


def _left_for_kv(spec: StageSpec, deployment: StageDeployment, split: int, left: float) -> tuple[int, float]:
    """vLLM's KV on GPUs: whole blocks in what the weights leave of the replica's share of each GPU (at most:
    vLLM first takes the activations' peak it measures at start, and CUDA graphs' memory, out of it)."""
    decoder = decoder_of(spec)
    heads_per_gpu = -(-decoder.num_kv_heads // split)
    per_token = 2 * decoder.num_layers * decoder.head_dim * deployment.element_bytes * heads_per_gpu
    block = spec.vllm.block_size
    tokens = int(left // (per_token * block)) * block
    return tokens, tokens * per_token


def _check_heads(spec: StageSpec, split: int) -> None:
    if spec.kind not in ("thinker", "talker"):
        return
    decoder = decoder_of(spec)
    kv_heads = decoder.num_kv_heads
    if decoder.num_heads % split or (kv_heads % split and split % kv_heads):
        raise PlanError(spec.name, "tensor_parallel_size", f"{split} does not divide the model's "
                        f"{decoder.num_heads} attention heads and {kv_heads} KV heads evenly")


def _check_fit(spec: StageSpec, replica: int, weights: float | None, kv_bytes: float, budget: float,
               deployment: StageDeployment) -> None:
    if weights is None:
        return
    share = (f"memory_fraction {deployment.memory_fraction:g} of a GPU" if deployment.memory_fraction is not None
             else "a whole GPU")
    if weights > budget:
        raise PlanError(spec.name, "devices", f"replica {replica}'s weights take {gb(weights)} a GPU, over its "
                        f"{gb(budget)} ({share}); give each replica more GPUs")
    if weights + kv_bytes > budget:
        raise PlanError(spec.name, "kv.num_blocks", f"replica {replica} needs {gb(weights + kv_bytes)} a GPU "
                        f"(weights {gb(weights)} + KV {gb(kv_bytes)}), over its {gb(budget)} ({share})")


def gb(num_bytes: float) -> str:
    return f"{num_bytes / 1e9:.1f} GB"
