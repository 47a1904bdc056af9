"""A runner whose model computes on a GPU: what it returns comes back to host memory."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from stages.plan import RunnerOutput, SchedulerPlan
from stages.requests.base import StageRequest
from stages.runners.base import ModelRunner


class OnDeviceRunner(ModelRunner):
    """`runner` (whose model, KV and step tensors are on a GPU) with its results moved to host memory in
    float32, as a stage on the CPU returns them: requests, the next stage and the wire see no GPU tensor."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner

    def execute(self, plan: SchedulerPlan) -> RunnerOutput:
        results = self.runner.execute(plan).results
        return RunnerOutput({request_id: to_host(result) for request_id, result in results.items()})

    def attach(self, request: StageRequest) -> None:
        self.runner.attach(request)


def to_host(value: Any) -> Any:
    """`value` with every tensor in it on the CPU (floating ones in float32), through tuples, lists, dicts and
    dataclasses; anything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.to("cpu", torch.float32) if value.is_floating_point() else value.cpu()
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(to_host(item) for item in value)
    if isinstance(value, tuple):  # a named tuple
        return type(value)(*(to_host(item) for item in value))
    if isinstance(value, dict):
        return {key: to_host(item) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: to_host(getattr(value, f.name))
                                             for f in dataclasses.fields(value) if f.init})
    return value
