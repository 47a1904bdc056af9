"""A stage's deployment in YAML: `replicas`, `devices`, `tensor_parallel_size`, `memory_fraction`, `dtype`."""

from __future__ import annotations

from liveserve.config_reader import ConfigError, Section, build
from orchestrator.deployment import GPUNode, StageDeployment
from stages.stage_spec import PACKAGED

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


def require_runnable(deployments: tuple[StageDeployment, ...]) -> None:
    """What this build serves outside Ray: replicas on the CPU; a stage on GPUs is planned (`liveserve plan`),
    or placed with Ray, where a native engine still computes on the CPU. (vLLM takes GPU arguments, but no
    stage process is given its GPUs outside Ray yet.)"""
    for deployment in deployments:
        if deployment.on_gpus:
            raise ConfigError(f"stages.{deployment.stage}.devices: this build starts no stage process on GPUs "
                              "(native engines compute on the CPU; nothing gives a vLLM stage its GPUs yet); a config "
                              "with GPUs is for `liveserve plan`, or for placing replicas on GPUs with "
                              "runtime.placement: ray")
