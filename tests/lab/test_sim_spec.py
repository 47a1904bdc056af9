"""Simulation specs: devices, replicas, tensor parallelism, KV pools sized to the memory weights leave."""

from pathlib import Path

import pytest

from lab.sim.spec import load_spec, parse_spec
from liveserve.config.loader import parse_config, read_config_data
from liveserve.config.reader import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SPECS = CONFIGS / "sim"
THINKER = {"num_layers": 48, "hidden": 2048, "num_heads": 32, "num_kv_heads": 4, "head_dim": 128,
           "intermediate": 768, "vocab": 151936, "num_experts": 128, "num_active_experts": 8}


def lab_pipeline():
    source = CONFIGS / "tiny-omni-cpu.yaml"
    return parse_config(read_config_data(source), source).pipeline


def spec(stage: dict, **device) -> dict:
    return {"calibration": "none", "device": {"type": "H200", **device}, "stages": {"thinker": stage}}


def test_replicas_on_devices_and_a_pool_per_device_sized_to_what_the_weights_leave():
    one = parse_spec(spec({"model": THINKER}), "one", "one.yaml")
    eight = parse_spec(spec({"model": THINKER, "devices": list(range(8))}, count=8), "eight", "eight.yaml")
    assert eight.stages["thinker"].replicas == 8 and eight.stages["thinker"].devices == tuple(range(8))
    model = one.stages["thinker"].model
    free = 141e9 * 0.9 - model.total_params * 2
    blocks = int(free // (16 * model.kv_bytes_per_token))  # the lab config's block size
    assert one.kv_overrides(lab_pipeline())[0].value == blocks == eight.kv_overrides(lab_pipeline())[0].value


def test_two_replicas_on_one_device_share_its_memory():
    shared = parse_spec(spec({"model": THINKER, "devices": [0, 0]}), "shared", "shared.yaml")
    model = shared.stages["thinker"].model
    free = 141e9 * 0.9 - 2 * model.total_params * 2
    assert shared.kv_overrides(lab_pipeline())[0].value == int(free / 2 // (16 * model.kv_bytes_per_token))


def test_tensor_parallel_devices_are_priced_as_that_many_gpus():
    device, = set(parse_spec(spec({"model": THINKER}, count=4, tensor_parallel=2), "tp", "tp.yaml").devices)
    assert (device.name, device.peak_tflops, device.hbm_tbps, device.memory_gb) == ("2xH200", 2 * 989.0, 9.6, 282.0)


@pytest.mark.parametrize("stage, device, message", [
    ({"model": THINKER, "devices": [0, 8]}, {"count": 8}, "one.yaml.stages.thinker.devices: must be in 0..7, got 8"),
    ({"model": THINKER, "devices": []}, {}, "one.yaml.stages.thinker.devices: expected a list of device indices"),
    ({"model": THINKER, "device": 2}, {"count": 2}, "one.yaml.stages.thinker.device: must be in 0..1, got 2"),
    ({"model": THINKER}, {"tensor_parallel": 0}, "one.yaml.device.tensor_parallel: must be >= 1"),
])
def test_a_bad_placement_is_named_in_one_line(stage, device, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("[", r"\[")):
        parse_spec(spec(stage, **device), "one", "one.yaml")


def test_the_shipped_specs_load_and_say_what_they_rest_on():
    for path in sorted(SPECS.glob("qwen3-omni-*.yaml")) + [SPECS / "voice-llm-8xh200.yaml"]:
        loaded = load_spec(str(path))
        assert loaded.calibration and loaded.stages["thinker"].model.total_params > 30e9
    cpu = load_spec(str(SPECS / "tiny-omni-cpu.yaml"))
    assert cpu.calibration and cpu.devices[0].name == "cpu" and not cpu.devices[0].stages_take_turns
    assert cpu.stages["thinker"].model.total_params < 20e6
    node = load_spec(str(SPECS / "qwen3-omni-8xh200.yaml"))
    assert len(node.devices) == 8 and all(s.devices == tuple(range(8)) for s in node.stages.values())
    voice = load_spec(str(SPECS / "voice-llm-8xh200.yaml"))
    assert list(voice.stages) == ["thinker"] and voice.stages["thinker"].replicas == 4


def test_a_stage_prices_its_steps_with_its_own_overheads():
    stage = {"model": THINKER, "step_overhead_ms": 10.0, "row_overhead_ms": 0.5}
    loaded = parse_spec(spec(stage, step_overhead_ms=2.0, row_overhead_ms=0.1), "own", "own.yaml")
    device = loaded.stages["thinker"].priced_on(loaded.devices[0])
    assert (device.step_overhead_s, device.row_overhead_s) == pytest.approx((0.010, 0.0005))
    plain = parse_spec(spec({"model": THINKER}, step_overhead_ms=2.0), "plain", "plain.yaml")
    assert plain.stages["thinker"].priced_on(plain.devices[0]).step_overhead_s == pytest.approx(0.002)


def test_a_cpu_device_gives_its_own_peaks_and_names_a_missing_one():
    cpu = {"type": "cpu", "peak_tflops": 0.04, "hbm_tbps": 0.03, "memory_gb": 24, "token_overhead_ms": 0.2,
           "stages_take_turns": False}
    device, = parse_spec({**spec({"model": THINKER}), "device": cpu}, "cpu", "cpu.yaml").devices
    assert (device.peak_tflops, device.token_overhead_s, device.stages_take_turns) == (0.04, pytest.approx(2e-4), False)
    del cpu["hbm_tbps"]
    with pytest.raises(ConfigError, match=r"cpu\.yaml\.device\.hbm_tbps: required"):
        parse_spec({**spec({"model": THINKER}), "device": cpu}, "cpu", "cpu.yaml")


def test_a_pool_the_spec_sets_is_not_resized_to_the_device():
    from lab.sim.server import SimulatedConfig

    sim = SimulatedConfig.load(None, (), load_spec(str(SPECS / "tiny-omni-cpu.yaml")))
    assert sim.config.pipeline.thinker.kv.num_blocks == 2048 == sim.config.pipeline.talker.kv.num_blocks


def test_a_stage_takes_its_step_jitter_and_names_a_negative_one():
    assert parse_spec(spec({"model": THINKER, "step_jitter": 0.3}), "j", "j.yaml").stages["thinker"].jitter == 0.3
    assert parse_spec(spec({"model": THINKER}), "j", "j.yaml").stages["thinker"].jitter == 0.0
    with pytest.raises(ConfigError, match=r"j\.yaml\.stages\.thinker\.step_jitter: must be >= 0"):
        parse_spec(spec({"model": THINKER, "step_jitter": -0.1}), "j", "j.yaml")
