"""A replay's HTML report from a result object: headline, plots, KV figures, requests, config; one offline file."""

from __future__ import annotations

import re
from pathlib import Path

from lab.replay.report import render_replay_report, report_path


def distribution(p50: float | None) -> dict:
    return {"mean": p50, "p50": p50, "p90": p50, "p95": p50, "p99": p50}


def result(requests: list[dict], kv: dict | None = None) -> dict:
    return {"audio_ttfp_ms": distribution(120.0), "text_ttft_ms": distribution(80.0), "audio_rtf": distribution(0.4),
            "e2e_ms": distribution(None), "continuity_ok_rate": 1.0,
            "continuity": {"c50": 1.0, "c100": 1.0, "c200": 1.0},
            "completed_rps": 2.5, "wasted_token_ratio": None, "num_requests": len(requests), "num_completed": 2,
            "num_cancelled": 1, "num_failed": 1, "kv": kv or {"reload_ms_on_path": None},
            "config": {"dataset": "random", "policy": "liveserve", "request_rate": "inf"}, "requests": requests}


REQUESTS = [
    {"request_id": "r0", "status": "completed", "turn_end_s": 10.0, "audio_ttfp_ms": 110.0, "text_ttft_ms": 70.0},
    {"request_id": "r1", "status": "cancelled", "turn_end_s": 10.5, "audio_ttfp_ms": 130.0, "text_ttft_ms": 90.0},
    {"request_id": "r2", "status": "failed", "turn_end_s": 11.0, "audio_ttfp_ms": None, "audio_rtf": "inf"},
]


def test_the_report_has_the_figures_the_plots_every_request_and_the_config_in_one_file():
    report = render_replay_report(result(REQUESTS))
    assert report.startswith("<!DOCTYPE html>") and "Replay: random, 3 requests, liveserve" in report
    assert "<td>audio TTFP (ms)</td><td>120.000</td>" in report and "<td>2.500</td>" in report
    assert report.count('src="data:image/png;base64,') == 2
    assert not re.search(r'(src|href)="(?!data:)', report)
    assert all(f"<td>{r['request_id']}</td><td>{r['status']}</td>" in report for r in REQUESTS)
    assert "Not measured" in report  # a running server's KV figures are not read
    assert "<td>request_rate</td><td>inf</td>" in report


def test_a_result_without_any_timing_says_why_each_plot_is_missing():
    report = render_replay_report(result([{"request_id": "r0", "status": "failed"}], kv={"evictions": 3.0}))
    assert "src=" not in report
    assert "CDF of audio TTFP and text TTFT over the served requests: no request has either." in report
    assert "no request has a turn end." in report and "<td>evictions</td><td>3.000</td>" in report


def test_the_report_goes_beside_the_json_never_over_it():
    assert report_path(Path("out/run.json")) == Path("out/run.html")
    assert report_path(Path("out/run")) == Path("out/run.html")
    assert report_path(Path("out/run.html")) == Path("out/run.html.report.html")
