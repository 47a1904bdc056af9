"""A simulation spec: the devices, the shape each stage is priced as and where it runs, and what the
served config changes (KV pools sized to the memory the weights leave, and the spec's own `set`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import yaml

from liveserve.config_document import Override
from liveserve.config_reader import ConfigError, Section, build
from orchestrator.config import PipelineConfig
from stages.sim.cost_model import DEVICES, DeviceSpec, ModelShape
from stages.sim.engine import SimulatedStage

KV_KINDS = ("thinker", "talker")


@dataclass(frozen=True)
class SimSpec:
    """`calibration` says what the step times rest on (every simulated result carries it)."""

    name: str
    calibration: str
    devices: tuple[DeviceSpec, ...]
    stages: dict[str, SimulatedStage]
    memory_utilization: float
    overrides: tuple[Override, ...]

    def kv_overrides(self, pipeline: PipelineConfig) -> tuple[Override, ...]:
        """Each device's memory x `memory_utilization` less its stages' weights, split between its
        thinker's and talker's KV pools in proportion to their bytes per token, as blocks."""
        result = []
        for index, device in enumerate(self.devices):
            here = {kind: stage for kind, stage in self.stages.items() if stage.device == index}
            weights = sum(stage.model.total_params * stage.model.bytes_per_param for stage in here.values())
            free = device.memory_gb * 1e9 * self.memory_utilization - weights
            kv = {kind: here[kind].model for kind in KV_KINDS if kind in here and getattr(pipeline, kind, None)}
            if free <= 0 and kv:
                raise ConfigError(f"{self.name}: the weights on device {index} ({weights / 1e9:.0f} GB) leave no "
                                  f"room for KV in {device.memory_gb:g} GB")
            per_token = sum(model.kv_bytes_per_token for model in kv.values())
            for kind, model in kv.items():
                block = getattr(pipeline, kind).kv.block_size * model.kv_bytes_per_token
                blocks = math.floor(free * model.kv_bytes_per_token / per_token / block)
                result.append(Override(("stages", kind, "kv", "num_blocks"), blocks))
        return tuple(result)


def shipped_specs() -> dict[str, Path]:
    root = Path(str(files("liveserve.configs"))) / "sim"
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
    return parse_spec(data, path.stem, str(path))


def parse_spec(data: object, name: str, where: str) -> SimSpec:
    root = Section(data, "")
    root.path = where
    calibration = root.value("calibration", str)
    devices = _devices(root.section("device"))
    stages = {}
    section = root.section("stages")
    for kind in list(section.data):
        stage = section.section(kind)
        device = stage.value("device", int, 0)
        if not 0 <= device < len(devices):
            raise ConfigError(f"{stage.where('device')}: must be in 0..{len(devices) - 1}, got {device}")
        stages[kind] = SimulatedStage(stage.section("model").fill(ModelShape, name=kind), device)
        stage.finish()
    section.finish()
    utilization = root.value("memory_utilization", float, 0.9)
    settings = root.raw("set") or []
    if not isinstance(settings, list) or not all(isinstance(text, str) for text in settings):
        raise ConfigError(f"{root.where('set')}: expected a list of KEY.PATH=VALUE strings, got {settings!r}")
    overrides = tuple(Override.parse(text) for text in settings)
    root.finish()
    return SimSpec(name, calibration, devices, stages, utilization, overrides)


def _devices(section: Section) -> tuple[DeviceSpec, ...]:
    kind = section.value("type", str)
    if kind not in DEVICES:
        raise ConfigError(f"{section.where('type')}: one of {', '.join(DEVICES)}, got {kind!r}")
    count = section.value("count", int, 1)
    base = DEVICES[kind]
    device = build(DeviceSpec, section.path, name=kind, peak_tflops=base.peak_tflops, hbm_tbps=base.hbm_tbps,
                   memory_gb=base.memory_gb,
                   host_link_gbytes_per_s=section.value("host_link_gbytes_per_s", float, base.host_link_gbytes_per_s),
                   compute_efficiency=section.value("compute_efficiency", float, 1.0),
                   bandwidth_efficiency=section.value("bandwidth_efficiency", float, 1.0),
                   step_overhead_s=section.value("step_overhead_ms", float, 0.0) / 1000)
    section.finish()
    return (device,) * count
