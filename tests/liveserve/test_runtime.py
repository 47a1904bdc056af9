"""Process-level start-up settings."""

from __future__ import annotations

import dataclasses
import gc
import logging

import pytest

from liveserve.config import deployment
from liveserve.config.deployment import require_runnable
from liveserve.config.document import Override
from liveserve.config.loader import load_config
from liveserve.config.reader import ConfigError
from liveserve.plan_command import plan
from liveserve.runtime import freeze_startup_objects, make_placement
from orchestrator.placement.base import LocalPlacement
from orchestrator.placement.processes import ProcessPlacement
from orchestrator.placement.ray_layout import RaySettings
from orchestrator.placement.replicated import replica_names


def test_objects_alive_at_start_up_are_kept_out_of_full_collections():
    held = [[i] for i in range(1000)]
    freeze_startup_objects()
    try:
        assert gc.get_freeze_count() >= len(held)
        assert not any(obj is held for obj in gc.get_objects())  # no generation holds them: a collection skips them
    finally:
        gc.unfreeze()


def on(config, placement: str):
    return dataclasses.replace(config, runtime=dataclasses.replace(config.runtime, placement=placement))


def test_the_placement_setting_picks_where_stage_engines_run():
    config = load_config("tiny-omni-cpu", overrides=[Override.parse("runtime.torch_threads=3")])
    processes = make_placement(config)
    assert isinstance(processes, ProcessPlacement) and processes.torch_threads == 3
    assert isinstance(make_placement(on(config, "threads")), LocalPlacement)


def test_each_replica_process_sees_the_gpus_the_plan_gives_it_and_a_cpu_replica_none():
    config = load_config("voice-h200")  # asr and tts x 8 on the CPU, the thinker on vLLM: 4 replicas x 2 GPUs
    placement = make_placement(config)
    launcher = placement.inner.launcher
    launcher.prepare(placement.expand(config.pipeline.stages), 1, logging.WARNING)
    try:
        seen = {name: args.environment for name, args in launcher.stage_args.items()}
        boards = {name: [slots for slots, _ in args.boards] for name, args in launcher.stage_args.items()}
    finally:
        launcher.close()
    assert [seen[f"thinker-{i}"] for i in range(4)] == [{"CUDA_VISIBLE_DEVICES": gpus}
                                                        for gpus in ("0,1", "2,3", "4,5", "6,7")]
    replicas = {deployment.stage: deployment.replicas for deployment in config.deployments}
    planned = {replica_names(row.stage, replicas[row.stage])[row.replica]: ",".join(map(str, row.gpus))
               for row in plan(config, config.runtime.node)}
    assert seen == {name: {"CUDA_VISIBLE_DEVICES": gpus} for name, gpus in planned.items()}  # as `plan` prints
    assert seen["asr-0"] == seen["tts-7"] == {"CUDA_VISIBLE_DEVICES": ""}  # set empty: no GPU 0 by accident
    # the urgency policy's boards: one per device; the CPU's holds every ASR and TTS replica, each GPU's its thinker
    assert boards["asr-0"] == boards["tts-7"] and len(boards["asr-0"][0]) == 16
    assert len(boards["thinker-1"]) == 2 and all(len(slots) == 1 for slots in boards["thinker-1"])
    assert not set(map(id, boards["thinker-0"])) & set(map(id, boards["thinker-1"]))


def test_ray_placement_reads_its_cluster_from_the_config_and_places_gpu_stages():
    overrides = ["runtime.placement=ray", "runtime.ray.num_gpus=4", "stages.thinker.devices=[[1]]"]
    config = load_config("tiny-omni-cpu", overrides=[Override.parse(text) for text in overrides])
    pytest.importorskip("ray")
    from orchestrator.placement.ray_launcher import RayLauncher
    assert config.runtime.ray == RaySettings(num_gpus=4)
    placement = make_placement(config)  # Ray starts only when the placement does
    assert isinstance(placement, ProcessPlacement) and isinstance(placement.launcher, RayLauncher)
    assert placement.launcher.settings.node_ip_address == "127.0.0.1"
    with pytest.raises(ConfigError, match="stages.thinker.devices: a native stage on a GPU runs in a process"):
        make_placement(on(config, "threads"))


def test_a_native_stage_with_devices_computes_on_its_gpu_where_cuda_is(monkeypatch):
    monkeypatch.setattr(deployment, "cuda_present", lambda: True)
    config = load_config("tiny-omni-h200")  # every stage x 8, one of each on every GPU
    require_runnable(config)
    thinker = config.pipeline.thinker
    assert (thinker.device, thinker.dtype) == ("cuda", "bfloat16")  # the process's first visible GPU: its own
    cpu = load_config("tiny-omni-cpu").pipeline.thinker
    assert (cpu.device, cpu.dtype) == ("cpu", "float32")
    with pytest.raises(ConfigError, match=r"^stages.encoder.devices: a native stage on a GPU runs in a process"):
        require_runnable(on(config, "threads"))
    two = load_config("tiny-omni-cpu", overrides=[Override.parse(text) for text in (
        "stages.thinker.devices=[[0, 1]]", "runtime.gpus=2x141GB")])
    with pytest.raises(ConfigError, match=r"^stages.thinker.devices: a native engine computes on one GPU a replica, "
                                          r"not 2 \(tensor parallelism needs backend: vllm\)$"):
        require_runnable(two)
    monkeypatch.setattr(deployment, "cuda_present", lambda: False)
    with pytest.raises(ConfigError, match=r"^stages.encoder.devices: native engines compute on CUDA GPUs, and this "
                                          r"machine has none"):
        require_runnable(config)
