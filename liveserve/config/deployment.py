"""A stage's deployment in YAML: `replicas`, `devices`, `tensor_parallel_size`, `memory_fraction`, `dtype`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from liveserve.config.reader import ConfigError, Section, build
from orchestrator.placement.deployment import GPUNode, StageDeployment
from orchestrator.placement.plan import PlanError, replica_gpus
from stages.stage_spec import PACKAGED

if TYPE_CHECKING:
    from liveserve.config.loader import LiveServeConfig

GPU_KEYS = ("tensor_parallel_size", "memory_fraction", "dtype")  # meaningful only with devices


def read_deployment(section: Section, stage: str) -> StageDeployment:
    """The deployment keys of `stages.<stage>`; the rest of the section is left to the caller."""
    devices = _read_devices(section)
    if devices is None:
        for key in GPU_KEYS:
            if section.has(key):
                raise ConfigError(f"{section.where(key)}: applies to a stage on GPUs (set devices); on the CPU "
                                  "this build's runners compute in float32, without tensor parallelism")
    elif stage in PACKAGED:
        raise ConfigError(f"{section.where('devices')}: this build runs {stage} on the CPU (its model library "
                          "from its package); it takes no GPUs")
    return build(StageDeployment, section.path, stage=stage, devices=devices,
                 replicas=section.value("replicas", int, 1),
                 tensor_parallel_size=section.value("tensor_parallel_size", int | None, None),
                 memory_fraction=section.value("memory_fraction", float | None, None),
                 dtype=section.value("dtype", str, "bfloat16"))


def _read_devices(section: Section) -> int | tuple[tuple[int, ...], ...] | None:
    """A number of GPUs per replica, or each replica's GPU indices: `2` or `[[0, 1], [2, 3]]`."""
    raw = section.raw("devices")
    if raw is None or _is_int(raw):
        return raw
    if isinstance(raw, list) and all(isinstance(gpus, list) and all(map(_is_int, gpus)) for gpus in raw):
        return tuple(tuple(gpus) for gpus in raw)
    raise ConfigError(f"{section.where('devices')}: expected a number of GPUs per replica, or each replica's "
                      f"GPU indices as a list of lists ([[0, 1], [2, 3]]), got {raw!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_gpus(text: str, where: str) -> GPUNode:
    """`8x141GB` as a node's GPUs; a mistake names `where` (`--gpus`, `runtime.gpus`)."""
    try:
        return GPUNode.parse(text)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def require_runnable(config: LiveServeConfig) -> None:
    """What this build serves. A native stage with `devices` computes on its replica's first GPU, one GPU a
    replica, in a process that sees its GPUs: placement processes (where this machine must have CUDA) or ray
    (whose nodes must); a backend: vllm stage on its GPUs (process_gpus)."""
    placement, backends = config.runtime.placement, {spec.name: spec.backend for spec in config.pipeline.stages}
    for deployment in config.deployments:
        if deployment.on_gpus and backends[deployment.stage] == "native":
            _require_native_gpu(deployment, placement)
    if placement != "ray":
        process_gpus(config)


def _require_native_gpu(deployment: StageDeployment, placement: str) -> None:
    where = f"stages.{deployment.stage}.devices"
    if deployment.gpus_per_replica != 1:
        raise ConfigError(f"{where}: a native engine computes on one GPU a replica, not "
                          f"{deployment.gpus_per_replica} (tensor parallelism needs backend: vllm)")
    if placement == "threads":
        raise ConfigError(f"{where}: a native stage on a GPU runs in a process that sees its GPU; set "
                          "runtime.placement to processes or ray")
    if placement == "processes" and not cuda_present():
        raise ConfigError(f"{where}: native engines compute on CUDA GPUs, and this machine has none "
                          "(remove devices to compute on the CPU; `liveserve plan` plans such a config)")


def cuda_present() -> bool:
    """Whether torch sees a CUDA GPU here (without starting CUDA in this process: stage processes fork from it)."""
    return torch.cuda.device_count() > 0


def process_gpus(config: LiveServeConfig) -> dict[str, tuple[int, ...]]:
    """Each stage replica's GPUs on the node `runtime.gpus` (whose GPUs `devices` numbers), by the name its
    process runs under, numbered as `liveserve plan` numbers them; a ConfigError naming the field for what
    cannot run there."""
    on_gpus = [deployment.stage for deployment in config.deployments if deployment.on_gpus]
    if not on_gpus:
        return {}
    if config.runtime.gpus is None:
        raise ConfigError(f"runtime.gpus: stages.{on_gpus[0]}.devices places replicas on GPUs; give the node's "
                          "GPUs (e.g. 8x141GB), which devices numbers")
    try:
        return replica_gpus(config.deployments, config.runtime.node)
    except PlanError as exc:
        raise ConfigError(f"stages.{exc.stage}.{exc.field}: {exc}") from None
