"""`stages.thinker.backend: vllm`: the shipped config loads, and every bad engine argument is one line naming
its field, raised while the config is read (before any process starts)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from liveserve.config.loader import load_config
from liveserve.config.reader import ConfigError

VLLM_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "voice-cpu-vllm.yaml"
GPU_CONFIG = VLLM_CONFIG.with_name("voice-h200.yaml")


def write(tmp_path, edit, config: Path = VLLM_CONFIG) -> str:
    data = yaml.safe_load(config.read_text())
    edit(data)
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def vllm_args(**changes):
    return lambda data: data["stages"]["thinker"]["vllm"].update(changes)


def kv(**section):
    return lambda data: data["stages"]["thinker"].update(kv=section)


def test_the_shipped_vllm_config_runs_the_voice_agents_thinker_on_vllm_with_its_gguf_weights():
    thinker = load_config(VLLM_CONFIG).pipeline.thinker
    assert (thinker.backend, thinker.kv, thinker.scheduler.policy) == ("vllm", None, "fcfs")
    assert thinker.gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (thinker.vllm.dtype, thinker.vllm.block_size, thinker.vllm.python.name) == ("float32", 32, "python")


@pytest.mark.parametrize("edit, message", [
    (vllm_args(dtype="float16"), "stages.thinker.vllm: dtype must be one of ('float32', 'bfloat16')"),
    (vllm_args(block_size=16), "stages.thinker.vllm: block_size must be a multiple of 32"),
    (vllm_args(kv_cache_mib=0), "stages.thinker.vllm: kv_cache_mib must be a positive integer, got 0"),
    (vllm_args(max_model_len="long"), "stages.thinker.vllm.max_model_len: expected int, got 'long'"),
    (vllm_args(enforce_eager="yes"), "stages.thinker.vllm.enforce_eager: expected bool, got 'yes'"),
    (vllm_args(gpu_memory_utilization=0.9), "stages.thinker.vllm.gpu_memory_utilization: unknown field"),
    (lambda d: d["stages"]["thinker"].update(backend="vlm"), "stages.thinker.backend: must be one of"),
    (lambda d: d["stages"]["thinker"].update(linear_dtype="bfloat16"),
     "stages.thinker: linear_dtype: stage thinker runs on vllm, which keeps its weights in its own dtype"),
    (lambda d: d["stages"]["thinker"].update(window={"tokens": 64}), "stages.thinker.window: vLLM keeps the KV"),
    (kv(eviction="next_use", host_mib=64), "stages.thinker.kv.eviction: vLLM offloads KV with a GPU-only transfer"),
    (lambda d: d["stages"]["thinker"]["scheduler"].update(policy="edf"), "stages.thinker.scheduler: unknown scheduling policy"),
    (lambda d: d["stages"].setdefault("tts", {}).update(backend="vllm"), "stages.tts: backend: vllm serves a thinker"),
    (lambda d: d.setdefault("runtime", {}).update(placement="threads"),
     "stages.thinker.backend: vllm runs in a stage process of its own interpreter"),
])
def test_bad_vllm_arguments_are_one_line_naming_the_field(tmp_path, edit, message):
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, edit))
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_the_urgency_policy_with_its_parameters_orders_a_thinker_on_vllm(tmp_path):
    scheduler = {"policy": "urgency", "urgency": {"p_safe_ms": 300.0}}
    thinker = load_config(write(tmp_path, lambda d: d["stages"]["thinker"]["scheduler"].update(scheduler))).pipeline.thinker
    assert (thinker.backend, thinker.scheduler.policy, thinker.scheduler.params.p_safe_ms) == ("vllm", "urgency", 300.0)


def test_vllm_arguments_under_the_native_backend_are_a_mistake(tmp_path):
    with pytest.raises(ConfigError, match=r"^stages.thinker.vllm: vllm arguments need backend: vllm"):
        load_config(write(tmp_path, lambda d: d["stages"]["thinker"].update(backend="native")))


def test_kv_eviction_next_use_on_gpus_offloads_to_host_memory_under_liveserves_cache_policy(tmp_path):
    config = load_config(write(tmp_path, kv(eviction="next_use", host_mib=65536), GPU_CONFIG))
    offload = config.pipeline.thinker.vllm.offload
    assert (offload.eviction, offload.host_mib, offload.is_on) == ("next_use", 65536, True)
    assert not load_config(GPU_CONFIG).pipeline.thinker.vllm.offload.is_on  # as shipped: no kv section, no offload


@pytest.mark.parametrize("section, message", [
    ({"eviction": "belady", "host_mib": 64}, "stages.thinker.kv: eviction must be one of ('none', 'lru', 'next_use')"),
    ({"eviction": "next_use"}, "stages.thinker.kv: host_mib must be a positive integer, got None"),
    ({"eviction": "lru", "host_mib": 0}, "stages.thinker.kv: host_mib must be a positive integer, got 0"),
    ({"eviction": "none", "host_mib": 64}, "stages.thinker.kv: host_mib sizes the host cache of eviction lru or"),
    ({"eviction": "next_use", "host_mib": 64, "preload": True}, "stages.thinker.kv.preload: unknown field"),
])
def test_bad_offload_settings_on_gpus_are_one_line_naming_the_field(tmp_path, section, message):
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, kv(**section), GPU_CONFIG))
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)
