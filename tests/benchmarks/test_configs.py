"""The benchmark configs: each names the lab's config (tiny-omni-cpu) as its base and pins what its figures rely on."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.replay.presets import PRESETS
from liveserve.config.document import Override
from liveserve.config.loader import load_config
from liveserve.config.reader import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks" / "configs"
STAGES = ("encoder", "thinker", "talker", "vocoder")


def pinned_as_measured(config) -> None:
    """FCFS everywhere, no KV offload, every stage on runtime.torch_threads, stages on threads."""
    pipeline = config.pipeline
    assert all(getattr(pipeline, kind).scheduler.policy == "fcfs" for kind in STAGES)
    for kind in ("thinker", "talker"):
        kv = getattr(pipeline, kind).kv
        assert (kv.eviction, kv.preload, kv.idle_offload_s) == ("none", False, None), kind
    assert all(getattr(pipeline, kind).threads is None for kind in STAGES)
    assert config.runtime.placement == "threads"


def test_many_sessions_admits_200_sessions_as_measured():
    config = load_config(CONFIGS / "many_sessions.yaml")
    assert config.server.max_sessions == 200
    pinned_as_measured(config)


def test_kv_pressure_has_a_small_thinker_pool_a_slow_link_and_runs_with_a_preset():
    with pytest.raises(ConfigError, match="host_blocks need a host tier"):
        load_config(CONFIGS / "kv_pressure.yaml")  # the preset chooses eviction and preload
    config = load_config(CONFIGS / "kv_pressure.yaml", PRESETS["fcfs-lru"].overrides(STAGES))
    kv = config.pipeline.thinker.kv
    assert (kv.num_blocks, kv.block_size, kv.host_blocks, kv.emulated_link_gbps) == (224, 16, 2048, 2.0)
    assert (kv.eviction, kv.preload) == ("lru", False)
    encoder = config.pipeline.encoder.scheduler
    assert (encoder.max_num_seqs, encoder.max_num_batched_tokens) == (16, 400)
    assert config.runtime.placement == "threads" and config.pipeline.talker.threads is None
    without_host_tier = load_config(CONFIGS / "kv_pressure.yaml", [Override.parse("stages.thinker.kv.host_blocks=0")])
    pinned_as_measured(without_host_tier)  # what the file itself says, before a preset
