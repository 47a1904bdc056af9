"""Simulation specs: devices, replicas, tensor parallelism, KV pools sized to the memory weights leave, and
stage shapes taken from a Qwen3-Omni config.json (`shapes`)."""

import json
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from lab.qwen3_omni.tiny_folder import SHAPES, write_tiny_folder
from lab.sim.qwen3_omni_shapes import CODEC_FRAMES
from lab.sim.spec import load_spec, parse_spec
from lab.sim.step_noise import StepJitter
from liveserve.config.loader import load_config, parse_config, read_config_data
from liveserve.config.reader import ConfigError
from stages.models.qwen3_omni.code2wav import build_code2wav
from stages.models.qwen3_omni.config import Qwen3OmniConfig
from stages.qwen3_omni_parts import num_parameters

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
    shapes = {path.stem: {kind: stage.model for kind, stage in load_spec(str(path)).stages.items()}
              for path in SPECS.glob("qwen3-omni-*.yaml")}
    assert len(shapes) == 4 and all(parts == shapes["qwen3-omni-1xh200"] for parts in shapes.values())


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
    assert parse_spec(spec({"model": THINKER, "step_jitter": 0.3}), "j", "j.yaml").stages["thinker"].jitter == \
        StepJitter(0.3)
    drifting = {"model": THINKER, "step_jitter": 0.3, "step_jitter_slow_share": 0.5, "step_jitter_slow_s": 1.5}
    assert parse_spec(spec(drifting), "j", "j.yaml").stages["thinker"].jitter == StepJitter(0.3, 0.5, 1.5)
    assert parse_spec(spec({"model": THINKER}), "j", "j.yaml").stages["thinker"].jitter == StepJitter()
    with pytest.raises(ConfigError, match=r"j\.yaml\.stages\.thinker\.step_jitter_slow_share: must be between 0 and 1"):
        parse_spec(spec({**drifting, "step_jitter_slow_share": 2}), "j", "j.yaml")
    with pytest.raises(ConfigError, match=r"j\.yaml\.stages\.thinker\.step_jitter_slow_s: must be > 0"):
        parse_spec(spec({**drifting, "step_jitter_slow_s": 0}), "j", "j.yaml")
    with pytest.raises(ConfigError, match=r"j\.yaml\.stages\.thinker\.step_jitter: must be >= 0"):
        parse_spec(spec({"model": THINKER, "step_jitter": -0.1}), "j", "j.yaml")


@pytest.fixture(scope="module")
def released() -> tuple[Qwen3OmniConfig, dict]:
    """The config.json qwen3-omni-h200 serves (the released one it declares, or its folder's where that is
    here), and the shapes the shipped spec takes from it."""
    config = load_config("qwen3-omni-h200").pipeline.thinker.model
    spec = load_spec(str(SPECS / "qwen3-omni-1xh200.yaml"))
    return config, {kind: stage.model for kind, stage in spec.stages.items()}


def test_the_decoders_shapes_are_their_text_configs(released):
    config, shapes = released
    for shape, decoder in ((shapes["thinker"], config.thinker), (shapes["talker"], config.talker.decoder)):
        assert (shape.num_layers, shape.hidden, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.intermediate,
                shape.vocab, shape.num_experts, shape.num_active_experts, shape.num_dense_layers) == (
            decoder.num_layers, decoder.hidden_size, decoder.num_heads, decoder.num_kv_heads, decoder.head_dim,
            decoder.moe_intermediate_size, decoder.vocab_size, decoder.num_experts, decoder.num_experts_per_tok, 0)
    thinker = shapes["thinker"]  # beyond its layers, only norms: two a layer, q and k norms, the final one
    assert thinker.extra_params == thinker.num_layers * 2 * (thinker.hidden + thinker.head_dim) + thinker.hidden
    assert thinker.extra_flops_per_token == 0


def test_the_encoder_and_vocoder_shapes_are_their_configs(released):
    config, shapes = released
    audio, code2wav, encoder, vocoder = config.audio.raw, config.code2wav.raw, shapes["encoder"], shapes["vocoder"]
    assert (encoder.num_layers, encoder.hidden, encoder.num_heads, encoder.num_kv_heads,
            encoder.num_heads * encoder.head_dim, encoder.intermediate, encoder.gated_mlp) == (
        audio["encoder_layers"], audio["d_model"], audio["encoder_attention_heads"], audio["encoder_attention_heads"],
        audio["d_model"], audio["encoder_ffn_dim"], False)
    assert (vocoder.num_layers, vocoder.hidden, vocoder.num_heads, vocoder.num_kv_heads, vocoder.intermediate) == (
        code2wav["num_hidden_layers"], code2wav["hidden_size"], code2wav["num_attention_heads"],
        code2wav["num_key_value_heads"], code2wav["intermediate_size"])


def test_every_stage_weighs_what_its_part_has(released):
    _, shapes = released
    for spec in load_config("qwen3-omni-h200").pipeline.stages:
        assert shapes[spec.kind].total_params == num_parameters(spec)


def test_the_talker_prices_its_shared_expert_projection_and_code_predictor_by_hand(released):
    """Per codec frame: 2 FLOPs a weight of the shared expert (and its gate) and of one thinker row's projection;
    the code predictor's 16 positions through its 5 dense layers, 15 of its heads, attention within the frame."""
    config, shapes = released
    talker, predictor, groups = config.talker.decoder, config.talker.code_predictor, config.talker.num_code_groups
    shared = talker.num_layers * (3 * talker.hidden_size * talker.shared_expert_intermediate_size + talker.hidden_size)
    projection = (config.talker.thinker_hidden_size + talker.hidden_size) * talker.intermediate_size
    width, heads, head_dim = predictor.hidden_size, predictor.num_heads, predictor.head_dim
    kv_heads = predictor.num_kv_heads
    layer = 2 * width * heads * head_dim + 2 * width * kv_heads * head_dim + 3 * width * predictor.intermediate_size
    steps = (2 * predictor.num_layers * layer * groups + 2 * width * predictor.vocab_size * (groups - 1)
             + 4 * predictor.num_layers * heads * head_dim * groups * (groups + 1) // 2)
    assert shapes["talker"].extra_flops_per_token == 2 * (shared + projection) + steps


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory) -> Path:
    """A tiny Qwen3-Omni folder whose thinker's first layer is dense (config.json's mlp_only_layers)."""
    folder = write_tiny_folder(tmp_path_factory.mktemp("models") / "tiny-a", SHAPES["tiny-a"], 0)
    data = json.loads((folder / "config.json").read_text())
    data["thinker_config"]["text_config"]["mlp_only_layers"] = [0]
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def test_a_spec_takes_its_shapes_from_a_folder_named_relative_to_it(tiny_folder):
    spec_file = tiny_folder.parent / "tiny.yaml"
    spec_file.write_text(yaml.safe_dump({"calibration": "none", "device": {"type": "H200"}, "shapes": "tiny-a",
                                         "stages": {"thinker": {}, "vocoder": {}}}))
    stages = load_spec(str(spec_file)).stages
    config = Qwen3OmniConfig.from_folder(tiny_folder)
    thinker = stages["thinker"].model
    assert (thinker.num_layers, thinker.num_dense_layers, thinker.dense_intermediate, thinker.intermediate) == (
        2, 1, config.thinker.intermediate_size, config.thinker.moe_intermediate_size)
    assert thinker.extra_params == 2 * 2 * (thinker.hidden + thinker.head_dim) + thinker.hidden  # norms only
    assert stages["vocoder"].model.extra_flops_per_token == pytest.approx(_convolution_flops_per_frame(config))


def _convolution_flops_per_frame(config: Qwen3OmniConfig) -> float:
    """code2wav's FLOPs outside its transformer, by hooks on a real forward: 2 a weight per output position of a
    convolution (per input position of a transposed one), per row of a linear layer."""
    module, flops = build_code2wav(config.code2wav).eval(), []

    def count(layer, inputs, output):
        positions = inputs[0].shape[-1] if isinstance(layer, nn.ConvTranspose1d) else output.shape[-1]
        rows = output.shape[:-1].numel() if isinstance(layer, nn.Linear) else positions
        flops.append(2 * layer.weight.numel() * rows)

    for name, layer in module.named_modules():
        if isinstance(layer, (nn.Conv1d, nn.ConvTranspose1d, nn.Linear)) and not name.startswith("pre_transformer"):
            layer.register_forward_hook(count)
    with torch.no_grad():
        module(torch.zeros(1, config.code2wav.num_quantizers, CODEC_FRAMES, dtype=torch.long))
    return sum(flops) / CODEC_FRAMES


@pytest.mark.parametrize("change, message", [
    ({"stages": {"thinker": {"model": THINKER}}},
     "one.yaml.stages.thinker.model: the spec's shapes give this stage's shape; give one of the two"),
    ({"stages": {"asr": {}}}, "one.yaml.stages.asr: Qwen3-Omni has no asr part"),
    ({"shapes": "tiny-omni-cpu"}, "one.yaml.shapes: tiny-omni-cpu does not serve a Qwen3-Omni model (its thinker is "
                                  "a DecoderConfig)"),
    ({"shapes": "no-such-config"}, "one.yaml.shapes: 'no-such-config' is neither a Qwen3-Omni folder nor a served "
                                   "config"),
])
def test_shapes_beside_a_stage_model_or_from_no_qwen3_omni_are_refused_in_one_line(change, message):
    data = {"calibration": "none", "device": {"type": "H200"}, "shapes": "qwen3-omni-h200", "stages": {"thinker": {}},
            **change}
    with pytest.raises(ConfigError) as refused:
        parse_spec(data, "one", "one.yaml", SPECS)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


def test_a_folder_that_is_not_qwen3_omni_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    data = {"calibration": "none", "device": {"type": "H200"}, "shapes": str(tmp_path), "stages": {"thinker": {}}}
    refused = r"^one\.yaml\.shapes: .*config\.json: architectures is \['LlamaForCausalLM'\]"
    with pytest.raises(ConfigError, match=refused):
        parse_spec(data, "one", "one.yaml")
