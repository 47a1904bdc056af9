"""The sweep's PNG plots, drawn on matplotlib's Agg canvas.

| file | x | y |
|---|---|---|
| `frontier.png` | completed req/s | P90 audio TTFP (ms); each curve's points in increasing load |
| `ttfp_cdf.png` | audio TTFP (ms) | share of requests, pooled over each policy's highest-load points |
| `continuity.png` | load | continuity ok-rate |
| `waste.png` | barge-in probability | wasted-token ratio |

Load is `max_concurrency` or `request_rate`, whichever the grid varies (the first written
if both); its values are spaced evenly on the x axis, unlimited concurrency and an
infinite rate last. A plot whose x axis the grid does not vary (continuity without a
varied load, waste without a varied `barge_in_prob`), or that has no value to draw, is
not drawn: `draw_plots` says why, and results.md repeats it. There is a curve per
policy; when other grid fields vary too, each combination of their values gets its own
curve in the policy's colour, labelled with those values. Missing values (failed
points, null figures) leave gaps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.sweep.spec import SweepSpec, show

if TYPE_CHECKING:
    from matplotlib.axes import Axes

LOAD_FIELDS = {"max_concurrency": "max concurrency (requests in flight)", "request_rate": "request rate (req/s)"}
LINE_STYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class _Sweep:
    spec: SweepSpec
    records: list[dict[str, Any]]

    @property
    def load(self) -> str | None:
        return next((name for name in self.spec.varied if name in LOAD_FIELDS), None)

    @property
    def done(self) -> list[dict[str, Any]]:
        return [record for record in self.records if record["result"] is not None]

    def color(self, policy: str) -> str:
        policies = list(dict.fromkeys(self.spec.policy_of(record["point"]) for record in self.records))
        return f"C{policies.index(policy) % 10}"


@dataclass(frozen=True)
class _Series:
    policy: str
    label: str
    records: list[dict[str, Any]]


def draw_plots(spec: SweepSpec, records: list[dict[str, Any]], out_dir: Path) -> dict[str, str | None]:
    """Draw each plot of `records` into `out_dir`: file name -> None if drawn, else why not."""
    # imported here: only a finished sweep needs matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    sweep = _Sweep(spec, records)
    outcome = {}
    for name, draw in PLOTS.items():
        figure = Figure(figsize=(7, 4.5), layout="constrained")
        FigureCanvasAgg(figure)
        outcome[name] = draw(figure.add_subplot(), sweep)
        if outcome[name] is None:
            figure.savefig(out_dir / name, dpi=110)
    return outcome


def _frontier(ax: Axes, sweep: _Sweep) -> str | None:
    load = sweep.load
    drawn = _plot_series(
        ax, sweep, _series(sweep, load),
        x_of=lambda r: _metric(r, "completed_rps"), y_of=lambda r: _metric(r, "audio_ttfp_ms", "p90"), tag=load,
    )
    if not drawn:
        return "no point has both a completed req/s and a P90 audio TTFP"
    order = f"\n(points labelled with {load}, joined in increasing order)" if load else ""
    ax.set(title=f"Throughput vs P90 audio TTFP{order}", xlabel="completed requests/s", ylabel="P90 audio TTFP (ms)")
    return None


def _ttfp_cdf(ax: Axes, sweep: _Sweep) -> str | None:
    load = sweep.load
    policies = dict.fromkeys(sweep.spec.policy_of(record["point"]) for record in sweep.done)
    for policy in policies:
        pooled = [record for record in sweep.done if sweep.spec.policy_of(record["point"]) == policy]
        if load is not None:
            top = max(_order(record["point"][load]) for record in pooled)
            pooled = [record for record in pooled if _order(record["point"][load]) == top]
        ttfps = sorted(
            ttfp
            for record in pooled
            for request in record["result"].get("requests") or []
            if math.isfinite(ttfp := _number(request.get("audio_ttfp_ms")))
        )
        if ttfps:
            at = f"{load}={show(load, pooled[0]['point'][load])}, " if load else ""
            shares = [(index + 1) / len(ttfps) for index in range(len(ttfps))]
            ax.step(ttfps, shares, where="post", color=sweep.color(policy), label=f"{policy} ({at}n={len(ttfps)})")
    if not ax.lines:
        return "no request has an audio TTFP"
    scope = "each policy's highest-load points" if load else "all of each policy's points"
    ax.set(title=f"CDF of audio TTFP per policy\n(requests pooled over {scope})", xlabel="audio TTFP (ms)",
           ylabel="share of requests", ylim=(0, 1.02))
    ax.legend(title="policy", fontsize="small")
    return None


def _continuity(ax: Axes, sweep: _Sweep) -> str | None:
    load = sweep.load
    if load is None:
        return f"the grid varies neither {' nor '.join(LOAD_FIELDS)}"
    values = sorted({record["point"][load] for record in sweep.records}, key=_order)
    position = {value: index for index, value in enumerate(values)}
    drawn = _plot_series(
        ax, sweep, _series(sweep, load),
        x_of=lambda r: position[r["point"][load]], y_of=lambda r: _metric(r, "continuity_ok_rate"),
    )
    if not drawn:
        return "no point has a continuity ok-rate"
    ax.set_xticks(range(len(values)), [show(load, value) for value in values])
    ax.set(title=f"Continuity ok-rate vs {load}", xlabel=LOAD_FIELDS[load],
           ylabel="continuity ok-rate (worst underrun <= 100 ms)", ylim=(0, 1.05))
    return None


def _waste(ax: Axes, sweep: _Sweep) -> str | None:
    if "barge_in_prob" not in sweep.spec.varied:
        return "the grid does not vary barge_in_prob"
    drawn = _plot_series(
        ax, sweep, _series(sweep, "barge_in_prob"),
        x_of=lambda r: _number(r["point"]["barge_in_prob"]), y_of=lambda r: _metric(r, "wasted_token_ratio"),
    )
    if not drawn:
        return "no point has a wasted-token ratio"
    ax.set(title="Wasted-token ratio vs barge-in probability", xlabel="barge-in probability",
           ylabel="wasted-token ratio (unheard / generated)")
    return None


PLOTS: dict[str, Callable[[Axes, _Sweep], str | None]] = {
    "frontier.png": _frontier,
    "ttfp_cdf.png": _ttfp_cdf,
    "continuity.png": _continuity,
    "waste.png": _waste,
}


def _series(sweep: _Sweep, x_field: str | None) -> list[_Series]:
    """The points, failed ones included (gaps): a series per policy and combination of the
    other varied fields (all but `x_field`), each in increasing `x_field` order."""
    others = [name for name in sweep.spec.varied if name not in ("policy", x_field)]
    groups: dict[tuple[Any, ...], _Series] = {}
    for record in sweep.records:
        point, policy = record["point"], sweep.spec.policy_of(record["point"])
        key = (policy, *(point[name] for name in others))
        label = ", ".join([policy, *(f"{name}={show(name, point[name])}" for name in others)])
        groups.setdefault(key, _Series(policy, label, [])).records.append(record)
    if x_field is not None:
        for series in groups.values():
            series.records.sort(key=lambda record: _order(record["point"][x_field]))
    return list(groups.values())


def _plot_series(
    ax: Axes,
    sweep: _Sweep,
    series: list[_Series],
    x_of: Callable[[dict[str, Any]], float],
    y_of: Callable[[dict[str, Any]], float],
    tag: str | None = None,
) -> bool:
    """Draw each series that has a point to show, tagging its points with their `tag` field's
    value; False when no series has one."""
    num_drawn: dict[str, int] = {}
    for one in series:
        xs, ys = [x_of(record) for record in one.records], [y_of(record) for record in one.records]
        shown = [index for index, (x, y) in enumerate(zip(xs, ys)) if math.isfinite(x) and math.isfinite(y)]
        if not shown:
            continue
        style = LINE_STYLES[num_drawn.get(one.policy, 0) % len(LINE_STYLES)]
        num_drawn[one.policy] = num_drawn.get(one.policy, 0) + 1
        ax.plot(xs, ys, color=sweep.color(one.policy), linestyle=style, marker="o", label=one.label)
        if tag is not None:
            for index in shown:
                ax.annotate(show(tag, one.records[index]["point"][tag]), (xs[index], ys[index]),
                            textcoords="offset points", xytext=(4, 4), fontsize="x-small")
    if num_drawn:
        ax.legend(title="policy", fontsize="small")
    return bool(num_drawn)


def _metric(record: dict[str, Any], *keys: str) -> float:
    value: Any = record["result"]
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return _number(value)


def _number(value: Any) -> float:
    """`value` as a finite float; NaN (a gap in a plot) when it is missing or not finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return math.nan
    try:
        number = float(value)
    except ValueError:
        return math.nan
    return number if math.isfinite(number) else math.nan


def _order(load: Any) -> float:
    """Sort key of a load value: None (no concurrency limit) and "inf" (all at once) last."""
    return math.inf if load is None else float(load)
