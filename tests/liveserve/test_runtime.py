"""Process-level start-up settings."""

from __future__ import annotations

import dataclasses
import gc

import pytest

from liveserve.config import RuntimeConfig, load_config
from liveserve.config_document import Override
from liveserve.config_reader import ConfigError
from liveserve.runtime import freeze_startup_objects, make_placement
from orchestrator.placement import LocalPlacement
from orchestrator.process_placement import ProcessPlacement
from orchestrator.ray_layout import RaySettings


def test_objects_alive_at_start_up_are_kept_out_of_full_collections():
    held = [[i] for i in range(1000)]
    freeze_startup_objects()
    try:
        assert gc.get_freeze_count() >= len(held)
        assert not any(obj is held for obj in gc.get_objects())  # no generation holds them: a collection skips them
    finally:
        gc.unfreeze()


def test_the_placement_setting_picks_where_stage_engines_run():
    processes = make_placement(RuntimeConfig(torch_threads=3, placement="processes"))
    assert isinstance(processes, ProcessPlacement) and processes.torch_threads == 3
    assert isinstance(make_placement(RuntimeConfig(placement="threads")), LocalPlacement)


def test_ray_placement_reads_its_cluster_from_the_config_and_places_gpu_stages():
    overrides = ["runtime.placement=ray", "runtime.ray.num_gpus=4", "stages.thinker.devices=[[1]]"]
    config = load_config("tiny-omni-cpu", overrides=[Override.parse(text) for text in overrides])
    pytest.importorskip("ray")
    from orchestrator.ray_launcher import RayLauncher
    assert config.runtime.ray == RaySettings(num_gpus=4)
    placement = make_placement(config.runtime, config.deployments)  # Ray starts only when the placement does
    assert isinstance(placement, ProcessPlacement) and isinstance(placement.launcher, RayLauncher)
    assert placement.launcher.settings.node_ip_address == "127.0.0.1"
    with pytest.raises(ConfigError, match="stages.thinker.devices: this build computes on the CPU"):
        make_placement(dataclasses.replace(config.runtime, placement="processes"), config.deployments)
