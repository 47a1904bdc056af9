"""Process-level settings applied once at start-up."""

from __future__ import annotations

import torch

from liveserve.config import RuntimeConfig


def configure_torch(runtime: RuntimeConfig) -> None:
    """Bound torch's intra-op threads: on a small CPU, the stage threads already share the cores."""
    torch.set_num_threads(runtime.torch_threads)
