"""`liveserve plan`: where a config's stage replicas go on a node, and the memory each takes there."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from liveserve.config.deployment import parse_gpus
from liveserve.config.document import Override
from liveserve.config.loader import LiveServeConfig, load_config
from liveserve.config.reader import ConfigError
from orchestrator.placement.deployment import GPUNode
from orchestrator.placement.plan import PlanError, ReplicaPlacement, gb, plan_placement

COLUMNS = ("replica", "node", "GPUs", "TP", "budget", "weights", "KV", "free", "KV tokens", "host tier")


def plan_command(config_path: Path | None, overrides: Iterable[Override], gpus: str | None) -> str:
    """The plan as text; a ConfigError naming the field when the config cannot run on the node."""
    config = load_config(config_path, overrides)
    node = parse_gpus(gpus, "--gpus") if gpus is not None else config.runtime.node
    return format_plan(config, node, plan(config, node))


def plan(config: LiveServeConfig, node: GPUNode) -> tuple[ReplicaPlacement, ...]:
    deployments = {deployment.stage: deployment for deployment in config.deployments}
    try:
        return plan_placement(config.pipeline.stages, deployments, node)
    except PlanError as exc:
        raise ConfigError(f"stages.{exc.stage}.{exc.field}: {exc}") from None


def format_plan(config: LiveServeConfig, node: GPUNode, placements: tuple[ReplicaPlacement, ...]) -> str:
    """A table of replicas (memory a GPU for replicas on GPUs, in all for those on the CPU), then each GPU's users."""
    where = f"1 node of {node.num_gpus} GPUs x {node.memory_gb:g} GB" if node.num_gpus else "1 node without GPUs"
    tp = {deployment.stage: deployment.gpus_per_replica for deployment in config.deployments}
    rows = [COLUMNS] + [_row(placement, tp[placement.stage]) for placement in placements]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [f"{config.model_name} ({config.source}) on {where}; memory a GPU (cpu: in all, float32)"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines + _gpu_lines(placements))


def _row(placement: ReplicaPlacement, tp: int) -> tuple[str, ...]:
    on_gpus = bool(placement.gpus)
    return (f"{placement.stage}[{placement.replica}]", str(placement.node),
            ",".join(map(str, placement.gpus)) if on_gpus else "cpu", str(tp) if on_gpus else "-",
            _size(placement.budget_bytes), "package" if placement.weights_bytes is None else gb(placement.weights_bytes),
            _size(placement.kv_bytes or None), _size(placement.free_bytes),
            f"{placement.kv_tokens:,}" if placement.kv_tokens else "-", _size(placement.host_tier_bytes or None))


def _size(num_bytes: float | None) -> str:
    return "-" if num_bytes is None else gb(num_bytes)


def _gpu_lines(placements: tuple[ReplicaPlacement, ...]) -> list[str]:
    users = defaultdict(list)
    for placement in placements:
        for gpu in placement.gpus:
            users[gpu].append(placement)
    return [f"GPU {gpu}: " + ", ".join(f"{p.stage}[{p.replica}] {_size(p.budget_bytes)}" for p in on_gpu)
            for gpu, on_gpu in sorted(users.items())]
