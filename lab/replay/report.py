"""A replay's HTML report beside its JSON: the headline figures, plots, the server's KV figures, every request, the
config; one file that opens offline."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lab.html_report import heading, key_values, matplotlib_figure, page, paragraph, table

DISTRIBUTIONS = (("audio_ttfp_ms", "audio TTFP (ms)"), ("text_ttft_ms", "text TTFT (ms)"), ("audio_rtf", "audio RTF"),
                 ("e2e_ms", "E2E latency (ms)"))
PERCENTILES = ("mean", "p50", "p90", "p95", "p99")
REQUEST_COLUMNS = (("request_id", "request"), ("status", "status"), ("audio_ttfp_ms", "audio TTFP (ms)"),
                   ("text_ttft_ms", "text TTFT (ms)"), ("audio_rtf", "RTF"), ("audio_ms", "audio (ms)"),
                   ("max_underrun_ms", "worst underrun (ms)"), ("text_tokens", "text tokens"),
                   ("unheard_text_tokens", "unheard text tokens"))
MAX_REQUEST_ROWS = 1000
STATUS_COLOURS = {"completed": "C0", "incomplete": "C2", "cancelled": "C1"}


def report_path(json_path: Path) -> Path:
    """Where the report of the result at `json_path` goes: the same name with .html (never the JSON itself)."""
    return json_path.with_suffix(".html") if json_path.suffix != ".html" else json_path.with_name(
        json_path.name + ".report.html")


def write_replay_report(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_replay_report(result), encoding="utf-8")


def render_replay_report(result: dict[str, Any]) -> str:
    """The report of a result object (lab.result_json), as one HTML document."""
    requests = result.get("requests") or []
    config = result.get("config") or {}
    title = f"Replay: {config.get('dataset', '?')}, {result['num_requests']} requests, {config.get('policy', '')}"
    return page(title, [
        heading("Headline figures"), _headline(result),
        heading("Plots"), *_plots(requests),
        heading("The server's KV figures"), _kv(result.get("kv") or {}),
        heading("Requests"), *_requests(requests),
        heading("Config"), key_values(config),
    ])


def _headline(result: dict[str, Any]) -> str:
    counts = table(("requests", "completed", "cancelled by a barge-in", "failed", "completed req/s",
                    "continuity ok-rate", "C50 / C100 / C200", "wasted-token ratio"),
                   [(result["num_requests"], result["num_completed"], result["num_cancelled"], result["num_failed"],
                     _number(result.get("completed_rps")), _number(result.get("continuity_ok_rate")),
                     " / ".join(_text(result["continuity"].get(c)) for c in ("c50", "c100", "c200")),
                     _number(result.get("wasted_token_ratio")))])
    rows = [(label, *(_number((result.get(key) or {}).get(p)) for p in PERCENTILES)) for key, label in DISTRIBUTIONS]
    return counts + table(("figure", *PERCENTILES), rows)


def _plots(requests: list[dict[str, Any]]) -> list[str]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    drawn = []
    for draw, caption in ((_draw_cdf, "CDF of audio TTFP and text TTFT over the served requests"),
                          (_draw_timeline, "Audio TTFP of each request against when its turn ended, by status")):
        figure = Figure(figsize=(7, 4), layout="constrained")
        FigureCanvasAgg(figure)
        reason = draw(figure.add_subplot(), requests)
        drawn.append(matplotlib_figure(figure, caption) if reason is None else paragraph(f"{caption}: {reason}.", True))
    return drawn


def _draw_cdf(ax, requests: list[dict[str, Any]]) -> str | None:
    for key, label in (("audio_ttfp_ms", "audio TTFP"), ("text_ttft_ms", "text TTFT")):
        values = sorted(v for r in requests if (v := _number(r.get(key))) is not None)
        if values:
            ax.step(values, [(i + 1) / len(values) for i in range(len(values))], where="post",
                    label=f"{label} (n={len(values)})")
    if not ax.lines:
        return "no request has either"
    ax.set(xlabel="ms from the end of the user's turn", ylabel="share of requests", ylim=(0, 1.02))
    ax.legend()
    return None


def _draw_timeline(ax, requests: list[dict[str, Any]]) -> str | None:
    timed = [r for r in requests if _number(r.get("turn_end_s")) is not None]
    if not timed:
        return "no request has a turn end"
    start = min(_number(r["turn_end_s"]) for r in timed)
    for status in sorted({r.get("status") or "unknown" for r in timed}):
        points = [(_number(r["turn_end_s"]) - start, _number(r.get("audio_ttfp_ms"))) for r in timed
                  if (r.get("status") or "unknown") == status and _number(r.get("audio_ttfp_ms")) is not None]
        if points:
            ax.scatter(*zip(*points), s=12, color=STATUS_COLOURS.get(status, "C3"), label=f"{status} ({len(points)})")
    if not ax.collections:
        return "no request has an audio TTFP"
    ax.set(xlabel="turn end (s from the first)", ylabel="audio TTFP (ms)")
    ax.legend(title="status")
    return None


def _kv(kv: dict[str, Any]) -> str:
    if not kv or all(value is None for value in kv.values()):
        return paragraph("Not measured: the server's /metrics are read only from a server the run started.", True)
    return key_values(kv)


def _requests(requests: list[dict[str, Any]]) -> list[str]:
    shown = requests[:MAX_REQUEST_ROWS]
    rows = [[_number(r.get(key)) if key not in ("request_id", "status") else r.get(key)
             for key, _ in REQUEST_COLUMNS] for r in shown]
    note = [paragraph(f"The first {MAX_REQUEST_ROWS} of {len(requests)}; every one is in the JSON.", True)] \
        if len(requests) > MAX_REQUEST_ROWS else []
    return [*note, table([label for _, label in REQUEST_COLUMNS], rows)]


def _number(value: Any) -> float | int | None:
    """A figure as a number, None when missing or not finite ("inf" strings included)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def _text(value: Any) -> str:
    number = _number(value)
    return "-" if number is None else f"{number:.3f}"
