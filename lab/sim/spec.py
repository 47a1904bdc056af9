"""A simulation spec: the devices, the shape each stage is priced as and where it runs, and what the
served config changes (KV pools sized to the memory the weights leave, and the spec's own `set`).

A stage's shape is its own `model` (ModelShape's fields), or, with the spec's `shapes`, its part of that
Qwen3-Omni model: a served config by name (`qwen3-omni-h200`) or file, or a model folder, whose config.json
gives every stage's shape (lab/sim/qwen3_omni_shapes.py); a stage then gives no `model`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from lab.sim.cost_model import DEVICES, DeviceSpec, ModelShape
from lab.sim.engine import SimulatedStage
from lab.sim.qwen3_omni_shapes import load_shapes
from lab.sim.server_loop import LoopPrices
from lab.sim.step_noise import StepJitter
from liveserve.config.document import Override
from liveserve.config.loader import configs_root
from liveserve.config.reader import ConfigError, Section, build
from orchestrator.config import PipelineConfig

KV_KINDS = ("thinker", "talker")


@dataclass(frozen=True)
class SimSpec:
    """`calibration` says what the step times rest on (every simulated result carries it); `server` what the
    server's own event loop spends (nothing unless the spec says); `machine_seed` which draw of the stages' step
    noise a run meets."""

    name: str
    calibration: str
    devices: tuple[DeviceSpec, ...]
    stages: dict[str, SimulatedStage]
    memory_utilization: float
    overrides: tuple[Override, ...]
    server: LoopPrices = LoopPrices()
    machine_seed: int = 0

    def kv_overrides(self, pipeline: PipelineConfig) -> tuple[Override, ...]:
        """Each device's memory x `memory_utilization` less the weights of the replicas on it, split between
        its thinker's and talker's KV pools in proportion to their bytes per token, as blocks; a stage's
        pool (one size for all its replicas) is the least any of its devices leaves."""
        blocks: dict[str, int] = {}
        for index, device in enumerate(self.devices):
            for kind, count in self._kv_blocks_on(index, device, pipeline).items():
                blocks[kind] = min(count, blocks.get(kind, count))
        return tuple(Override(("stages", kind, "kv", "num_blocks"), count) for kind, count in blocks.items())

    def _kv_blocks_on(self, index: int, device: DeviceSpec, pipeline: PipelineConfig) -> dict[str, int]:
        here = [stage for stage in self.stages.values() for at in stage.devices if at == index]
        weights = sum(stage.model.total_params * stage.model.bytes_per_param for stage in here)
        free = device.memory_gb * 1e9 * self.memory_utilization - weights
        kv = {kind: stage.model for kind, stage in self.stages.items()
              if kind in KV_KINDS and index in stage.devices and getattr(pipeline, kind, None)}
        if free <= 0 and kv:
            raise ConfigError(f"{self.name}: the weights on device {index} ({weights / 1e9:.0f} GB) leave no "
                              f"room for KV in {device.memory_gb:g} GB")
        per_token = sum(model.kv_bytes_per_token * sum(d == index for d in self.stages[kind].devices)
                        for kind, model in kv.items())
        return {kind: math.floor(free * model.kv_bytes_per_token / per_token
                                 / (getattr(pipeline, kind).kv.block_size * model.kv_bytes_per_token))
                for kind, model in kv.items()}


def shipped_specs() -> dict[str, Path]:
    root = configs_root() / "sim"
    return {path.stem: path for path in sorted(root.glob("*.yaml"))}


def load_spec(name_or_path: str) -> SimSpec:
    """A shipped spec by name, or a spec file; ConfigError naming the file and field if it is wrong."""
    shipped = shipped_specs()
    path = shipped.get(name_or_path) or Path(name_or_path)
    if not path.is_file():
        raise ConfigError(f"--simulate: no spec {name_or_path!r} (shipped: {', '.join(shipped)})")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML ({exc})") from None
    return parse_spec(data, path.stem, str(path), path.parent)


def parse_spec(data: object, name: str, where: str, relative_to: Path = Path(".")) -> SimSpec:
    """`relative_to`: where a relative `shapes` path is taken from (the spec file's folder)."""
    root = Section(data, "")
    root.path = where
    calibration = root.value("calibration", str)
    devices = _devices(root.section("device"))
    shapes = _shapes(root, relative_to)
    stages = {}
    section = root.section("stages")
    for kind in list(section.data):
        stage = section.section(kind)
        stages[kind] = SimulatedStage(_stage_shape(stage, kind, shapes),
                                      _stage_devices(stage, len(devices)), _ms(stage, "step_overhead_ms"),
                                      _ms(stage, "row_overhead_ms"), _ms(stage, "token_overhead_ms"),
                                      _step_jitter(stage))
        stage.finish()
    section.finish()
    utilization = root.value("memory_utilization", float, 0.9)
    settings = root.raw("set") or []
    if not isinstance(settings, list) or not all(isinstance(text, str) for text in settings):
        raise ConfigError(f"{root.where('set')}: expected a list of KEY.PATH=VALUE strings, got {settings!r}")
    overrides = tuple(Override.parse(text) for text in settings)
    server = _server(root.section("server")) if root.has("server") else LoopPrices()
    root.finish()
    return SimSpec(name, calibration, devices, stages, utilization, overrides, server)


def _server(section: Section) -> LoopPrices:
    """The server loop's prices in ms (see LoopPrices): `message_ms`, `output_ms`, `vad_step_ms`, `vad_window_ms`;
    each 0 if not given."""
    names = ("message", "output", "vad_step", "vad_window")
    prices = LoopPrices(**{f"{name}_s": _ms(section, f"{name}_ms") or 0.0 for name in names})
    section.finish()
    return prices


def _shapes(root: Section, relative_to: Path) -> Mapping[str, ModelShape] | None:
    """The parts' shapes of the Qwen3-Omni model `shapes` names; None without it."""
    source = root.value("shapes", str | None, None)
    if source is None:
        return None
    try:
        return load_shapes(source, relative_to)
    except ConfigError as exc:
        raise ConfigError(f"{root.where('shapes')}: {exc}") from None


def _stage_shape(stage: Section, kind: str, shapes: Mapping[str, ModelShape] | None) -> ModelShape:
    """The stage's own `model`, or its part's shape from the spec's `shapes` (then it gives no `model`)."""
    if shapes is None:
        return stage.section("model").fill(ModelShape, name=kind)
    if stage.has("model"):
        raise ConfigError(f"{stage.where('model')}: the spec's shapes give this stage's shape; give one of the two")
    if kind not in shapes:
        raise ConfigError(f"{stage.path}: Qwen3-Omni has no {kind} part to take the shape of (the spec's shapes "
                          f"give {', '.join(shapes)})")
    return shapes[kind]


def _ms(section: Section, key: str) -> float | None:
    """An optional non-negative duration in ms, as seconds."""
    value = _non_negative(section, key, None)
    return None if value is None else value / 1000


def _step_jitter(stage: Section) -> StepJitter:
    """`step_jitter` (0: every step at its price), `step_jitter_slow_share` (0) and `step_jitter_slow_s` (1)."""
    share = stage.value("step_jitter_slow_share", float, 0.0)
    if not 0 <= share <= 1:
        raise ConfigError(f"{stage.where('step_jitter_slow_share')}: must be between 0 and 1, got {share}")
    slow_s = stage.value("step_jitter_slow_s", float, 1.0)
    if not slow_s > 0:
        raise ConfigError(f"{stage.where('step_jitter_slow_s')}: must be > 0, got {slow_s}")
    return StepJitter(_non_negative(stage, "step_jitter"), share, slow_s)


def _non_negative(section: Section, key: str, default: float | None = 0.0) -> float | None:
    """An optional number >= 0 (`default` if not given)."""
    value = section.value(key, float, default)
    if value is not None and value < 0:
        raise ConfigError(f"{section.where(key)}: must be >= 0, got {value}")
    return value


def _stage_devices(stage: Section, count: int) -> tuple[int, ...]:
    """`device: I` (one replica) or `devices: [I, ...]` (a replica on each), indices into the spec's devices."""
    if "devices" in stage.data:
        devices, key = stage.raw("devices"), "devices"
        if not isinstance(devices, list) or not devices or not all(type(d) is int for d in devices):
            raise ConfigError(f"{stage.where(key)}: expected a list of device indices, got {devices!r}")
    else:
        devices, key = [stage.value("device", int, 0)], "device"
    for device in devices:
        if not 0 <= device < count:
            raise ConfigError(f"{stage.where(key)}: must be in 0..{count - 1}, got {device}")
    return tuple(devices)


def _devices(section: Section) -> tuple[DeviceSpec, ...]:
    """`count` devices of `type` (H200, H100: their published peaks unless the spec gives its own
    `peak_tflops`, `hbm_tbps`, `memory_gb`; `cpu`: the spec must give all three); with
    `tensor_parallel: N`, each is N GPUs priced as one device of N times the compute, bandwidth, memory
    and host link (ideal tensor parallelism: the all-reduces between them are not priced, beyond what
    `step_overhead_ms` stands for)."""
    kind = section.value("type", str)
    if kind not in (*DEVICES, "cpu"):
        raise ConfigError(f"{section.where('type')}: one of {', '.join(DEVICES)}, cpu, got {kind!r}")
    base = DEVICES.get(kind)
    peaks = {name: section.value(name, float, *(() if base is None else (getattr(base, name),)))
             for name in ("peak_tflops", "hbm_tbps", "memory_gb")}
    count = section.value("count", int, 1)
    parallel = section.value("tensor_parallel", int, 1)
    if parallel < 1:
        raise ConfigError(f"{section.where('tensor_parallel')}: must be >= 1, got {parallel}")
    link = section.value("host_link_gbytes_per_s", float, 55.0 if base is None else base.host_link_gbytes_per_s)
    device = build(DeviceSpec, section.path, name=kind if parallel == 1 else f"{parallel}x{kind}",
                   **{name: value * parallel for name, value in peaks.items()}, host_link_gbytes_per_s=link * parallel,
                   compute_efficiency=section.value("compute_efficiency", float, 1.0),
                   bandwidth_efficiency=section.value("bandwidth_efficiency", float, 1.0),
                   step_overhead_s=_ms(section, "step_overhead_ms") or 0.0,
                   row_overhead_s=_ms(section, "row_overhead_ms") or 0.0,
                   token_overhead_s=_ms(section, "token_overhead_ms") or 0.0,
                   stages_take_turns=section.value("stages_take_turns", bool, True))
    section.finish()
    return (device,) * count
