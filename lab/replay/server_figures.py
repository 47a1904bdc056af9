"""The server's own figures for a replay, from /metrics scraped before and after it.

Each `kv` field of the result is read from the Prometheus sample(s) below; a field
whose metric this server does not export is null. Counters are differences over the
run; `peak_device_blocks` is the high-water mark the server reports at the end, and
`mean_device_blocks` the blocks held on average over the run's duration.

| field | metric |
|---|---|
| `reload_ms_on_path` | `liveserve_kv_reload_seconds_total{path="critical"}` x 1000 |
| `reload_ms_off_path` | `liveserve_kv_reload_seconds_total{path="background"}` x 1000 |
| `preload_hits` | `liveserve_kv_preloads_total{outcome="hit"}` |
| `preload_cancelled` | `liveserve_kv_preloads_total{outcome="cancelled"}` |
| `evictions` | `liveserve_kv_evictions_total`, all labels |
| `peak_device_blocks` | `liveserve_kv_blocks_peak`, summed over stages |
| `peak_device_blocks_by_stage` | `liveserve_kv_blocks_peak` by stage |
| `mean_device_blocks` | `liveserve_kv_block_seconds_total`, summed over stages, / duration |
| `mean_device_blocks_by_stage` | `liveserve_kv_block_seconds_total` by stage / duration |
| `preemptions` | `liveserve_stage_preemptions`, summed over stages |
| `preemptions_by_stage` | `liveserve_stage_preemptions` by stage |
| `unheard_units` | `liveserve_unheard_units_total` by stage |
| `preloads` | `liveserve_kv_preloads_total` by outcome (admitted, too_late, no_room, hit, ...) |
| `fallbacks` | `liveserve_kv_fallbacks_total` by kind (load_wait, protection_lifted, store), summed over stages |
| `peak_host_blocks_by_stage` | `liveserve_kv_host_blocks{when="peak"}` by stage |
"""

from __future__ import annotations

from collections.abc import Mapping

from lab.prometheus import label_values, total

COUNTERS = {
    "reload_ms_on_path": ("liveserve_kv_reload_seconds_total", {"path": "critical"}, 1000.0),
    "reload_ms_off_path": ("liveserve_kv_reload_seconds_total", {"path": "background"}, 1000.0),
    "preload_hits": ("liveserve_kv_preloads_total", {"outcome": "hit"}, 1.0),
    "preload_cancelled": ("liveserve_kv_preloads_total", {"outcome": "cancelled"}, 1.0),
    "evictions": ("liveserve_kv_evictions_total", {}, 1.0),
    "preemptions": ("liveserve_stage_preemptions", {}, 1.0),
}
PREEMPTIONS = "liveserve_stage_preemptions"
PEAK_BLOCKS = "liveserve_kv_blocks_peak"
BLOCK_SECONDS = "liveserve_kv_block_seconds_total"
PRELOADS = "liveserve_kv_preloads_total"
UNHEARD = "liveserve_unheard_units_total"
FALLBACKS = "liveserve_kv_fallbacks_total"
HOST_BLOCKS = "liveserve_kv_host_blocks"


def kv_figures(before: Mapping[str, float], after: Mapping[str, float], duration_s: float) -> dict:
    """The result's `kv` object from two scrapes (`lab.prometheus` samples) `duration_s` apart."""
    figures = {}
    for field, (name, labels, scale) in COUNTERS.items():
        change = _change(before, after, name, labels)
        figures[field] = None if change is None else scale * change
    figures["peak_device_blocks"] = total(after, PEAK_BLOCKS, {})
    figures["peak_device_blocks_by_stage"] = {
        stage: total(after, PEAK_BLOCKS, {"stage": stage}) for stage in label_values(after, PEAK_BLOCKS, "stage")
    }
    figures["mean_device_blocks"] = _mean_blocks(before, after, {}, duration_s)
    figures["mean_device_blocks_by_stage"] = {
        stage: _mean_blocks(before, after, {"stage": stage}, duration_s)
        for stage in label_values(after, BLOCK_SECONDS, "stage")
    }
    figures["preemptions_by_stage"] = {
        stage: _change(before, after, PREEMPTIONS, {"stage": stage})
        for stage in label_values(after, PREEMPTIONS, "stage")
    }
    figures["preloads"] = {
        outcome: _change(before, after, PRELOADS, {"outcome": outcome})
        for outcome in label_values(after, PRELOADS, "outcome")
    }
    figures["fallbacks"] = {
        kind: _change(before, after, FALLBACKS, {"kind": kind}) for kind in label_values(after, FALLBACKS, "kind")
    }
    figures["peak_host_blocks_by_stage"] = {
        stage: total(after, HOST_BLOCKS, {"stage": stage, "when": "peak"})
        for stage in label_values(after, HOST_BLOCKS, "stage")
    }
    figures["unheard_units"] = {
        stage: _change(before, after, UNHEARD, {"stage": stage}) for stage in label_values(after, UNHEARD, "stage")
    }
    return figures


def _change(before: Mapping[str, float], after: Mapping[str, float], name: str,
            labels: Mapping[str, str]) -> float | None:
    """How much counter `name` (with `labels`) grew between the scrapes; None if `after` has none."""
    end = total(after, name, labels)
    return None if end is None else end - (total(before, name, labels) or 0.0)


def _mean_blocks(before: Mapping[str, float], after: Mapping[str, float], labels: Mapping[str, str],
                 duration_s: float) -> float | None:
    held = _change(before, after, BLOCK_SECONDS, labels)
    return None if held is None or duration_s <= 0 else held / duration_s
