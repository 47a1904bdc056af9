"""What a fresh duplex benchmark server serves: the given config with the run's overrides."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from lab.duplex.options import DuplexOptions
from liveserve.config.document import Override
from liveserve.config.loader import LiveServeConfig


def server_overrides(options: DuplexOptions, data: object) -> tuple[Override, ...]:
    """The overrides of the config document `data` that a fresh server for `options` serves, in order.

    `duplex.frame_ms`; the thinker's `window` (null, i.e. unbounded, without `--window`; with one, its
    `--history`, and the thinker's KV has no host tier: a stream idle between frames would be written back
    every frame);
    `stages.thinker.kv.num_blocks` (with `--kv-blocks`); `admission.policy` (`--admission`, else
    aimd with a ramp and fixed without) and the `--admission-set` keys; and
    `server.max_sessions` raised so every stream of a fixed run (plus the warm-up
    session, which may still be closing) is let in, or, with a ramp, set to `--sessions`
    when given (the limit under test) and above the offered count when not. Then `--set`'s
    overrides, which may change any of these. The result is validated where it is served.
    """
    window = None if options.window is None else {"tokens": options.window, "sinks": options.sinks or 0}
    if options.history is not None:
        window["history"] = options.history
    settings: list[tuple[tuple[str, ...], Any]] = [(("duplex", "frame_ms"), options.frame_ms),
                                                   (("stages", "thinker", "window"), window)]
    if window is not None:
        settings += [(("stages", "thinker", "kv", key), value)
                     for key, value in (("eviction", "none"), ("preload", False), ("idle_offload_s", None))]
    if options.kv_blocks is not None:
        settings.append((("stages", "thinker", "kv", "num_blocks"), options.kv_blocks))
    settings.append((("admission", "policy"), options.admission_policy))
    settings.extend((("admission", name), value) for name, value in options.admission_set)
    settings.append((("server", "max_sessions"), _max_sessions(options, _configured_max_sessions(data))))
    return (*(Override(path, value) for path, value in settings), *options.overrides)


def _configured_max_sessions(data: object) -> Any:
    server = data.get("server") if isinstance(data, dict) else None
    return server.get("max_sessions", 1) if isinstance(server, dict) else 1


def _max_sessions(options: DuplexOptions, configured: Any) -> int:
    if options.ramp is None:
        return max(options.sessions + 1, configured if isinstance(configured, int) else 1)
    return options.sessions or len(options.offer_times()) + 1


def describe(config: LiveServeConfig) -> dict[str, Any]:
    """The served settings a duplex result carries besides where they came from."""
    thinker = config.pipeline.thinker
    return {
        "frame_ms": config.duplex.frame_ms,
        "thinker_window": None if thinker.window is None else asdict(thinker.window),
        "kv_num_blocks": thinker.kv.num_blocks,
        "kv_block_size": thinker.kv.block_size,
        "admission": asdict(config.admission),
        "max_sessions": config.server.max_sessions,
    }
