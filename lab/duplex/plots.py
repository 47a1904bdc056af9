"""A duplex run's PNG plots, drawn on matplotlib's Agg canvas from the result object.

| file | x | y |
|---|---|---|
| `latency.png` | run time (s), bucket middles | per-frame latency p50 / p90 / p99 / max per 10-s bucket (ms), with the frame budget and half of it |
| `occupancy.png` | run time (s) | thinker KV occupancy (0-1), t_sat measured and predicted marked |
| `ramp.png` (ramp runs) | run time (s) | sessions offered, admitted, rejected (cumulative), live (server) and the admission cap |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def draw_plots(result: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Write the plots that apply to `result` into `out_dir`; returns their paths."""
    # imported here: only a finished run needs matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out_dir.mkdir(parents=True, exist_ok=True)
    plots: dict[str, Callable[[Axes, Mapping[str, Any]], None]] = {"latency.png": _latency, "occupancy.png": _occupancy}
    if result["ramp"] is not None:
        plots["ramp.png"] = _ramp
    written = []
    for name, draw in plots.items():
        figure = Figure(figsize=(8, 4.5))
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        draw(axes, result)
        axes.set_xlabel("run time (s)")
        axes.grid(alpha=0.3)
        axes.legend(loc="best", fontsize="small")
        figure.tight_layout()
        figure.savefig(out_dir / name, dpi=110)
        written.append(out_dir / name)
    return written


def _latency(axes: Axes, result: Mapping[str, Any]) -> None:
    buckets = result["frame_latency_ms"]
    edges = [b["start_s"] for b in buckets] + [buckets[-1]["end_s"]]
    for key in ("p50", "p90", "p99", "max"):
        values = [b[key] if b[key] is not None else float("nan") for b in buckets]
        axes.stairs(values, edges, label=key, linestyle=":" if key == "max" else "-", linewidth=1.5)
    frame_ms = result["config"]["frame_ms"]
    axes.axhline(frame_ms, color="red", linestyle="--", linewidth=1, label=f"frame budget ({frame_ms} ms)")
    axes.axhline(frame_ms / 2, color="orange", linestyle="--", linewidth=1, label="half the budget")
    axes.set_ylim(bottom=0)
    axes.set_ylabel("per-frame latency (ms)")
    axes.set_title(_title("Per-frame latency per 10-s bucket", result))


def _occupancy(axes: Axes, result: Mapping[str, Any]) -> None:
    points = result["occupancy"]
    axes.plot([t for t, _ in points], [o for _, o in points], "-", label="thinker KV occupancy")
    axes.axhline(0.99, color="grey", linestyle=":", linewidth=1, label="saturated (0.99)")
    right = max([result["config"]["duration_s"]] + [t for t, _ in points])
    for key, color, label in (("t_sat_measured_s", "red", "t_sat measured"),
                              ("t_sat_predicted_s", "purple", "t_sat predicted")):
        at = result[key]
        if at is None:
            axes.plot([], [], " ", label=f"{label}: none")
        elif at <= 2 * right:  # a forecast far beyond the run is named, not drawn
            right = max(right, at)
            axes.axvline(at, color=color, linestyle="--", label=f"{label} ({at:.1f} s)")
        else:
            axes.plot([], [], " ", label=f"{label}: {at:.0f} s (off the plot)")
    for stall in result["stalls"]:
        axes.axvspan(stall["start_s"], stall["end_s"], color="red", alpha=0.08)
    axes.set_xlim(0, right * 1.02)
    axes.set_ylim(0, 1.05)
    axes.set_ylabel("occupancy (0-1)")
    axes.set_title(_title(f"KV pool occupancy ({result['stalled_sessions']} stalled sessions, shaded)", result))


def _ramp(axes: Axes, result: Mapping[str, Any]) -> None:
    timeline = result["ramp"]["timeline"]
    times = [row["t"] for row in timeline]
    for key, style, label in (("offered", ":", "offered"), ("admitted", "-", "admitted"), ("rejected", "-", "rejected"),
                              ("live_server", "-", "live (server)"), ("cap", "--", "admission cap")):
        axes.plot(times, [row[key] if row[key] is not None else float("nan") for row in timeline], style, label=label)
    axes.set_ylabel("sessions")
    axes.set_title(_title(f"Ramp at {result['ramp']['rate']:g} sessions/s", result))


def _title(what: str, result: Mapping[str, Any]) -> str:
    config = result["config"]
    if "thinker_window" not in config:
        bound = f"server {config.get('server')}"
    elif config["thinker_window"] is None:
        bound = "unbounded"
    else:
        bound = f"window {config['thinker_window']['tokens']} + {config['thinker_window']['sinks']} sinks"
    return f"{what}\n{config.get('frame_ms')} ms frames, {bound}"
