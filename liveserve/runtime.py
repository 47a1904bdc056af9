"""Process-level settings applied once at start-up."""

from __future__ import annotations

import gc

import torch

from liveserve.config.deployment import process_gpus, require_runnable
from liveserve.config.loader import LiveServeConfig, RuntimeConfig
from liveserve.config.reader import ConfigError
from orchestrator.placement.base import LocalPlacement, Placement
from orchestrator.placement.deployment import StageDeployment
from orchestrator.placement.processes import ProcessPlacement
from orchestrator.placement.replicated import ReplicatedPlacement
from orchestrator.placement.stage_launcher import ForkserverLauncher, StageLauncher


def make_placement(config: LiveServeConfig) -> Placement:
    """Where the config's stage engines run (`runtime.placement`), as many of each as its deployment's
    `replicas`, each stage process seeing its replica's GPUs; a ConfigError naming the field for what this
    build cannot run (require_runnable)."""
    runtime, deployments = config.runtime, config.deployments
    require_runnable(config)
    if runtime.placement == "ray":
        placement = ProcessPlacement(runtime.torch_threads, ray_launcher(runtime, deployments))
    elif runtime.placement == "processes":
        placement = ProcessPlacement(runtime.torch_threads, ForkserverLauncher(process_gpus(config)))
    else:
        placement = LocalPlacement()
    replicas = {deployment.stage: deployment.replicas for deployment in deployments if deployment.replicas > 1}
    return ReplicatedPlacement(placement, replicas) if replicas else placement


def ray_launcher(runtime: RuntimeConfig, deployments: tuple[StageDeployment, ...]) -> StageLauncher:
    """Ray is imported only for a config that places with it, and is an optional dependency."""
    try:
        from orchestrator.placement.ray_launcher import RayLauncher
    except ImportError as exc:
        raise ConfigError(f"runtime.placement: ray needs Ray, which is not installed ({exc}); "
                          "pip install 'liveserve[ray]'") from None
    return RayLauncher(runtime.ray, deployments)


def configure_torch(runtime: RuntimeConfig) -> None:
    """Bound torch's intra-op threads: on a small CPU, the stage threads already share the cores."""
    torch.set_num_threads(runtime.torch_threads)


def freeze_startup_objects() -> None:
    """Move everything alive after start-up (modules, models, tokenizer tables), which lives as
    long as the process, out of the collector's reach: a full collection then walks only what
    serving allocated, instead of pausing every thread to walk it all."""
    gc.collect()
    gc.freeze()
