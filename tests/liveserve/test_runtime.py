"""Process-level start-up settings."""

from __future__ import annotations

import gc

from liveserve.runtime import freeze_startup_objects


def test_objects_alive_at_start_up_are_kept_out_of_full_collections():
    held = [[i] for i in range(1000)]
    freeze_startup_objects()
    try:
        assert gc.get_freeze_count() >= len(held)
        assert not any(obj is held for obj in gc.get_objects())  # no generation holds them: a collection skips them
    finally:
        gc.unfreeze()
