"""The YAML a fresh benchmark server runs from: the given config with the run's overrides."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from liveserve.bench.duplex.options import DuplexOptions
from liveserve.config import LiveServeConfig, parse_config
from liveserve.config_reader import ConfigError


def derive_server_config(options: DuplexOptions, data: object, source: Path) -> tuple[dict, LiveServeConfig]:
    """The raw and validated config of `data` (read from `source`) with `options` applied.

    Overrides: `duplex.frame_ms`; the thinker's `window` (removed, i.e. unbounded,
    without `--window`; with one, the thinker's KV has no host tier); `stages.thinker.kv.num_blocks`; `admission.policy` and the
    `--admission-set` keys (validated with the rest of the config); and
    `server.max_sessions` raised so every stream of a fixed run (plus the warm-up
    session, which may still be closing) is let in, or, with a ramp, set to
    `--sessions` when given (the limit under test) and above the offered count when not.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    derived = copy.deepcopy(data)
    _section(derived, "duplex")["frame_ms"] = options.frame_ms
    thinker = _section(_section(derived, "stages"), "thinker")
    thinker.pop("window", None)
    if options.window is not None:  # a window takes no host tier
        thinker["window"] = {"tokens": options.window, "sinks": options.sinks or 0}
        _section(thinker, "kv").update(eviction="none", preload=False, idle_offload_s=None)
    if options.kv_blocks is not None:
        _section(thinker, "kv")["num_blocks"] = options.kv_blocks
    admission = _section(derived, "admission")
    if options.admission_policy is not None:
        admission["policy"] = options.admission_policy
    admission.update(options.admission_set)
    server = _section(derived, "server")
    server["max_sessions"] = _max_sessions(options, server.get("max_sessions", 1))
    return derived, parse_config(derived, source)


def _max_sessions(options: DuplexOptions, configured: Any) -> int:
    if options.ramp is None:
        return max(options.sessions + 1, configured if isinstance(configured, int) else 1)
    return options.sessions or len(options.offer_times()) + 1


def _section(parent: dict, key: str) -> dict:
    """`parent[key]` as a mapping, created empty when absent or null."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
    return value


def describe(raw: dict, source: Path) -> dict[str, Any]:
    """The served settings a result should carry: where they came from and the overridden values."""
    thinker = raw["stages"]["thinker"]
    kv = thinker.get("kv") or {}
    return {
        "server_config": str(source),
        "frame_ms": raw["duplex"]["frame_ms"],
        "thinker_window": thinker.get("window"),
        "kv_num_blocks": kv.get("num_blocks"),
        "kv_block_size": kv.get("block_size"),
        "admission": {"policy": "fixed", **(raw.get("admission") or {})},
        "max_sessions": raw["server"]["max_sessions"],
    }
