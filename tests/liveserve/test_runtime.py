"""Process-level start-up settings."""

from __future__ import annotations

import gc

from liveserve.config import RuntimeConfig
from liveserve.runtime import freeze_startup_objects, make_placement
from orchestrator.placement import LocalPlacement
from orchestrator.process_placement import ProcessPlacement


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
