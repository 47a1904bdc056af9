"""results.md and results.html: the sweep's table, then its plots, or why a plot was not drawn.

The table's columns depend on the command: a replay sweep shows latency, continuity,
throughput and waste, a duplex sweep per-frame latency, stalls and KV occupancy. Only
replay sweeps draw plots (`lab.sweep.plots`). results.html is one file that opens offline:
the table, the plots embedded, each point's error in full, the spec and its text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.html_report import heading, key_values, page, paragraph, png_figure, preformatted, table
from lab.sweep.plots import draw_plots
from lab.sweep.spec import SweepSpec, describe, show

RESULTS_MD = "results.md"
RESULTS_HTML = "results.html"

# per command: header, path into the result object, format
REPLAY_COLUMNS = (
    ("audio TTFP P50 (ms)", ("audio_ttfp_ms", "p50"), "{:.1f}"),
    ("audio TTFP P90 (ms)", ("audio_ttfp_ms", "p90"), "{:.1f}"),
    ("text TTFT P90 (ms)", ("text_ttft_ms", "p90"), "{:.1f}"),
    ("audio RTF mean", ("audio_rtf", "mean"), "{:.3f}"),
    ("continuity ok-rate", ("continuity_ok_rate",), "{:.3f}"),
    ("completed req/s", ("completed_rps",), "{:.2f}"),
    ("wasted-token ratio", ("wasted_token_ratio",), "{:.3f}"),
)
DUPLEX_COLUMNS = (
    ("admitted", ("sessions", "admitted"), "{}"),
    ("rejected", ("sessions", "rejected"), "{}"),
    ("frame latency P50 (ms)", ("frame_latency_overall_ms", "p50"), "{:.1f}"),
    ("frame latency P99 (ms)", ("frame_latency_overall_ms", "p99"), "{:.1f}"),
    ("frames/s", ("frames_per_s",), "{:.1f}"),
    ("stalled sessions", ("stalled_sessions",), "{}"),
    ("peak KV occupancy", ("peak_occupancy",), "{:.3f}"),
    ("t_sat measured (s)", ("t_sat_measured_s",), "{:.1f}"),
    ("t_sat predicted (s)", ("t_sat_predicted_s",), "{:.1f}"),
)
COLUMNS = {"replay": REPLAY_COLUMNS, "duplex": DUPLEX_COLUMNS}
REPLAY_DEFINITIONS = (
    "TTFP/TTFT: the user's turn end -> first audio/text delta. RTF < 1 keeps up with playback. "
    "Continuity ok-rate: share of served requests whose worst playback underrun is <= 100 ms. "
    "Wasted-token ratio: tokens generated but never heard (barge-ins) / tokens generated. "
    "`-`: no value. Full definitions: `lab.result_json`."
)
DUPLEX_DEFINITIONS = (
    "Frame latency: the server's, from the tick that made a frame due to its last token, over the whole run. "
    "Stalled sessions: sessions owed a frame that got none for longer than max(1 s, 3 frame periods). "
    "Peak KV occupancy: the thinker pool's highest polled occupancy; t_sat: when it first reached 0.99, "
    "and the server's forecast. `-`: no value. Full definitions: `lab.duplex.result`."
)
DEFINITIONS = {"replay": REPLAY_DEFINITIONS, "duplex": DUPLEX_DEFINITIONS}
NO_PLOTS = "A duplex sweep draws no plots; each point's whole result (its timelines too) is in results.json."


def write_report(spec: SweepSpec, records: list[dict[str, Any]], out_dir: Path) -> None:
    """Draw the plots (replay) into `out_dir`, then write `out_dir/results.md` and `results.html` about `records`."""
    plots = draw_plots(spec, records, out_dir) if spec.command == "replay" else {}
    (out_dir / RESULTS_MD).write_text(render_markdown(spec, records, plots), encoding="utf-8")
    (out_dir / RESULTS_HTML).write_text(render_html(spec, records, plots, out_dir), encoding="utf-8")


def render_markdown(spec: SweepSpec, records: list[dict[str, Any]], plots: dict[str, str | None]) -> str:
    """The report: a summary, one table row per record, then each plot (None: drawn) or why not."""
    num_failed = sum(record["error"] is not None for record in records)
    shared = describe(spec.shared) or "the defaults"
    lines = [
        f"# Sweep `{spec.source}`",
        "",
        f"{len(records)} points, {num_failed} failed. Every point: {shared}.",
        "",
        *_table(spec, records),
        "",
        DEFINITIONS[spec.command],
        "",
        "## Plots",
        "",
        *([] if plots else [NO_PLOTS]),
    ]
    for name, reason in plots.items():
        lines.append(f"![{name}]({name})" if reason is None else f"- `{name}` not drawn: {reason}.")
    return "\n".join(lines) + "\n"


def render_html(spec: SweepSpec, records: list[dict[str, Any]], plots: dict[str, str | None], out_dir: Path) -> str:
    """The report as one HTML document: the summary, the table, the plots drawn into `out_dir` (embedded) or why
    not, the spec's shared settings and grid, and the spec file's text."""
    num_failed = sum(record["error"] is not None for record in records)
    shared = describe(spec.shared) or "the defaults"
    header, rows = _rows(spec, records)
    figures = [png_figure((out_dir / name).read_bytes(), name) if reason is None
               else paragraph(f"{name} not drawn: {reason}.", quiet=True) for name, reason in plots.items()]
    spec_text = spec.source.read_text(encoding="utf-8") if spec.source.is_file() else f"({spec.source} is gone)"
    return page(f"Sweep {spec.source}", [
        paragraph(f"{len(records)} points, {num_failed} failed. Every point: {shared}."),
        table(header, rows, error_column="error"),
        paragraph(DEFINITIONS[spec.command], quiet=True),
        heading("Plots"), *(figures or [paragraph(NO_PLOTS, quiet=True)]),
        heading("Spec"), key_values({"command": spec.command, **spec.shared,
                                     **{f"grid.{name}": list(values) for name, values in spec.grid.items()}}),
        preformatted(spec_text),
    ])


def _table(spec: SweepSpec, records: list[dict[str, Any]]) -> list[str]:
    header, rows = _rows(spec, records)
    escaped = [[cell.replace("|", "\\|").replace("\n", " ") for cell in row] for row in rows]
    return ["| " + " | ".join(row) + " |" for row in [header, ["---"] * len(header), *escaped]]


def _rows(spec: SweepSpec, records: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The table's header and its rows of formatted cells (`-`: no value), one row per record."""
    with_errors = any(record["error"] is not None for record in records)
    columns = COLUMNS[spec.command]
    header = [*spec.grid, *(title for title, _, _ in columns), *(["error"] if with_errors else [])]
    rows = []
    for record in records:
        row = [_cell(show(name, record["point"][name])) for name in spec.grid]
        row += [_cell(_lookup(record["result"], keys), fmt) for _, keys, fmt in columns]
        if with_errors:
            row.append(_cell(record["error"]))
        rows.append(row)
    return header, rows


def _lookup(result: dict[str, Any] | None, keys: tuple[str, ...]) -> Any:
    value: Any = result
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _cell(value: Any, fmt: str = "{}") -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt.format(value)
    return str(value)
