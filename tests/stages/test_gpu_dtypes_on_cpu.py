"""A GPU stage's path, dtypes included, run on the CPU: every stage of a turn computes in bfloat16 (weights, KV,
gathered attention), its results handed on in float32 by OnDeviceRunner, as a bf16 deployment on GPUs computes
(the CUDA kernels apart, which test_triton_* runs in Triton's interpreter)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from lab.qwen3_omni.tiny_folder import SHAPES, write_tiny_folder
from liveserve.config.document import override_argument
from liveserve.config.loader import load_config
from liveserve.one_turn import run_one_turn
from orchestrator.session.events import TurnRequest
from stages import factory
from stages.runners.on_device import OnDeviceRunner


def in_dtype(config, dtype: str):
    stages = {spec.name: dataclasses.replace(spec, dtype=dtype) for spec in config.pipeline.stages}
    return dataclasses.replace(config, pipeline=dataclasses.replace(config.pipeline, **stages))


def turn(config) -> dict:
    return asyncio.run(run_one_turn(config, None, "hello there", TurnRequest(max_tokens=8))).summary()


@pytest.fixture
def runners(monkeypatch) -> list:
    built, runner_of = [], factory.runner_of
    monkeypatch.setattr(factory, "runner_of", lambda *args: built.append(runner_of(*args)) or built[-1])
    return built


def test_a_tiny_omni_turn_computes_in_bfloat16_end_to_end(runners):
    config = load_config("tiny-omni-cpu", [override_argument("runtime.placement=threads")])
    summary = turn(in_dtype(config, "bfloat16"))
    assert summary["text_tokens"] == 8 and summary["audio_s"] > 0
    assert len(runners) == 4 and all(isinstance(runner, OnDeviceRunner) for runner in runners)


def test_a_tiny_qwen3_omni_turn_computes_in_bfloat16_end_to_end(runners, tmp_path):
    folder = write_tiny_folder(tmp_path / "tiny-a", SHAPES["tiny-a"], 0)
    sets = [f"model.folder={folder}", "runtime.placement=threads"]
    summary = turn(in_dtype(load_config("qwen3-omni-tiny-cpu", [override_argument(s) for s in sets]), "bfloat16"))
    assert summary["text_tokens"] == 8 and summary["audio_s"] > 0
    assert len(runners) == 4 and all(isinstance(runner, OnDeviceRunner) for runner in runners)
