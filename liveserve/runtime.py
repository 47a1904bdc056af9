"""Process-level settings applied once at start-up."""

from __future__ import annotations

import gc

import torch

from liveserve.config import RuntimeConfig
from orchestrator.placement import LocalPlacement, Placement
from orchestrator.process_placement import ProcessPlacement


def make_placement(runtime: RuntimeConfig) -> Placement:
    """Where the stage engines run (`runtime.placement`)."""
    if runtime.placement == "processes":
        return ProcessPlacement(runtime.torch_threads)
    return LocalPlacement()


def configure_torch(runtime: RuntimeConfig) -> None:
    """Bound torch's intra-op threads: on a small CPU, the stage threads already share the cores."""
    torch.set_num_threads(runtime.torch_threads)


def freeze_startup_objects() -> None:
    """Move everything alive after start-up (modules, models, tokenizer tables), which lives as
    long as the process, out of the collector's reach: a full collection then walks only what
    serving allocated, instead of pausing every thread to walk it all."""
    gc.collect()
    gc.freeze()
