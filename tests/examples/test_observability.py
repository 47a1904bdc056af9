"""examples/observability: every Grafana query names a metric the server exports, and the files fit together."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from liveserve.admission import KVWatch, make_admission
from liveserve.config.loader import LAB_CONFIG, load_config
from liveserve.config.server import ServerConfig
from liveserve.realtime.metrics import ServerMetrics

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "observability"
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
METRIC = re.compile(r"\bliveserve_[a-z0-9_]+\b")


def exported_names() -> set[str]:
    """Every sample name the server's registry can export (each family's, by its type), samples or not yet."""
    config = load_config(LAB_CONFIG, [])
    metrics = ServerMetrics(lambda: [])
    metrics.watch_admission(make_admission(config.admission, 0.08, config.server.max_sessions), KVWatch(10.0, 600.0))
    return {family.name + suffix for family in metrics.registry.collect() for suffix in SUFFIXES[family.type]}


def queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every target of every panel."""
    dashboard = json.loads((EXAMPLE / "grafana" / "liveserve.json").read_text())
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel.get("targets", [])]


def test_every_query_names_only_metrics_the_server_exports():
    exported, found = exported_names(), queries()
    assert len(found) > 30
    for title, expr in found:
        named = set(METRIC.findall(expr))
        assert named, f"{title!r}: {expr} names no liveserve metric"
        assert named <= exported, f"{title!r}: {sorted(named - exported)} are not exported"
    # The panels cover the page's parts: sessions, stages, KV, admission and latency.
    used = {name for _, expr in found for name in METRIC.findall(expr)}
    for metric in ("liveserve_live_sessions", "liveserve_stage_queue_depth", "liveserve_kv_occupancy",
                   "liveserve_kv_time_to_saturation_seconds", "liveserve_admission_cap",
                   "liveserve_audio_ttfp_seconds_bucket", "liveserve_duplex_frame_latency_seconds_bucket",
                   "liveserve_scheduler_requests_total", "liveserve_kv_reload_seconds_total"):
        assert metric in used, metric


def test_the_scrape_config_compose_file_and_provisioning_fit_together():
    scrape, = yaml.safe_load((EXAMPLE / "prometheus.yaml").read_text())["scrape_configs"]
    assert scrape["static_configs"][0]["targets"] == [f"127.0.0.1:{ServerConfig().port}"]
    assert scrape["metrics_path"] == "/metrics"
    compose = yaml.safe_load((EXAMPLE / "docker-compose.yaml").read_text())
    for service in compose["services"].values():
        for volume in service["volumes"]:
            assert (EXAMPLE / volume.split(":")[0]).is_file(), volume
    source, = yaml.safe_load((EXAMPLE / "grafana" / "datasource.yaml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"].endswith(":9090")
