"""Policy presets: which scheduler and KV residency a benchmarked server runs with.

A preset is a list of `--set` overrides of every stage of the run's config it concerns:
the scheduler of each stage in the config's graph, the KV residency of its thinker and
talker (where it has them). Whether this build has a preset's components is decided by the config
loader itself: the derived config must validate (an unknown scheduling policy or KV
field is refused there), so a preset needing a component that does not exist yet is
reported, never run as something else.

| preset | scheduler | KV offload | preload |
|---|---|---|---|
| `fcfs-nooffload` | fcfs | none: pressure preempts and recomputes (vLLM-Omni without offload) | - |
| `fcfs-lru` | fcfs | host tier, LRU eviction (vLLM-Omni with offload) | off |
| `liveserve` (tiny-omni-cpu as shipped) | urgency | host tier, next-use eviction | on |
| `liveserve-idle` | urgency | host tier, next-use eviction, idle offload | on |
| `liveserve-fcfs` | fcfs | host tier, next-use eviction | on |
| `liveserve-lru` | urgency | host tier, LRU eviction | on |
| `liveserve-nopreload` | urgency | host tier, next-use eviction | off |
| `liveserve-nooffload` | urgency | none | - |

A thinker on vLLM (`backend: vllm`) keeps its KV in vLLM: a preset without KV offload sets only its
scheduler (fcfs is vLLM's own, urgency orders vLLM's scheduler); one with offload is refused there.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from liveserve.config.document import Override, apply_overrides
from liveserve.config.loader import LiveServeConfig, parse_config
from liveserve.config.pipeline import read_graph
from liveserve.config.reader import ConfigError, Section

KV_STAGES = ("thinker", "talker")  # the stages with paged KV, where a graph has them
IDLE_OFFLOAD_S = 1.0  # liveserve-idle: dormant KV not needed within this leaves the device, pressure or not


@dataclass(frozen=True)
class Preset:
    name: str
    scheduler: str
    eviction: str = "none"
    preload: bool = False
    idle_offload_s: float | None = None

    def overrides(self, stage_kinds: tuple[str, ...], on_vllm: frozenset[str] = frozenset()) -> tuple[Override, ...]:
        """The settings this preset makes, stage by stage, for a graph of `stage_kinds`, those in `on_vllm` on
        vLLM (their KV set only when the preset offloads, for the config loader to refuse)."""
        kv = {"eviction": self.eviction, "preload": self.preload, "idle_offload_s": self.idle_offload_s}
        kv_stages = [kind for kind in KV_STAGES if kind in stage_kinds and (kind not in on_vllm or self.offloads)]
        return (*(Override(("stages", kind, "scheduler", "policy"), self.scheduler) for kind in stage_kinds),
                *(Override(("stages", kind, "kv", key), value) for kind in kv_stages for key, value in kv.items()))

    @property
    def offloads(self) -> bool:
        return self.eviction != "none"

    @property
    def components(self) -> str:
        offload = "no KV offload" if self.eviction == "none" else f"{self.eviction} KV eviction"
        idle = ", idle offload" if self.idle_offload_s is not None else ""
        return f"{self.scheduler} scheduling, {offload}{idle}" + (", preload" if self.preload else "")


PRESETS = {
    preset.name: preset
    for preset in (
        Preset("fcfs-nooffload", "fcfs"),
        Preset("fcfs-lru", "fcfs", "lru"),
        Preset("liveserve", "urgency", "next_use", preload=True),
        Preset("liveserve-idle", "urgency", "next_use", preload=True, idle_offload_s=IDLE_OFFLOAD_S),
        Preset("liveserve-fcfs", "fcfs", "next_use", preload=True),
        Preset("liveserve-lru", "urgency", "lru", preload=True),
        Preset("liveserve-nopreload", "urgency", "next_use"),
        Preset("liveserve-nooffload", "urgency"),
    )
}


class PresetUnavailable(ValueError):
    """A preset that is unknown, or whose components this build does not have."""


def preset_overrides(name: str, data: object, source: Path) -> tuple[Override, ...]:
    """Preset `name`'s settings for the stages of raw config `data`'s graph (ConfigError if the graph is invalid)."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    stages = data.get("stages") if isinstance(data.get("stages"), dict) else {}
    on_vllm = frozenset(kind for kind, stage in stages.items() if isinstance(stage, dict) and stage.get("backend") == "vllm")
    return _preset(name).overrides(read_graph(Section(data, "")).kinds, on_vllm)


def derive_config(name: str, data: object, source: Path) -> tuple[dict, LiveServeConfig]:
    """The raw and validated config of preset `name` applied to raw config `data`."""
    preset = _preset(name)
    try:
        derived = apply_overrides(data, preset_overrides(name, data, source))
        return derived, parse_config(derived, source)
    except ConfigError as exc:
        raise PresetUnavailable(
            f"policy preset {name!r} ({preset.components}) cannot run here: the server refuses the config "
            f"it derives ({exc})"
        ) from None


def _preset(name: str) -> Preset:
    if name not in PRESETS:
        raise PresetUnavailable(f"unknown policy preset {name!r}; presets: {', '.join(PRESETS)}")
    return PRESETS[name]
