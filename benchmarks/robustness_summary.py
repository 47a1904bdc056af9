"""The robustness grid's verdict: each scenario's ratios, the aggregates, issue 47's "must hold" criteria,
where the losses are (by region of the grid), a plot of the ratios and a short table.

A scenario's `p90_ratio` is the shipped policies' P90 audio TTFP over FCFS+LRU's (each the mean over the
simulated machines both ran on); it is `loaded` where FCFS+LRU's P90 is at least LOADED_FACTOR times its
unloaded P90; `continuity_delta` is the shipped policies' continuity-ok share minus FCFS+LRU's. With a floor,
`floor_ratio` is FCFS+LRU's P90 on as many other machines over its P90 on those: what the machine alone
changes, which the `floor_` aggregates sum up. A scenario that did not run, or has no P90 for a run, is an
error: the criteria are taken over the others, and `all_hold` needs there to be none.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from pathlib import Path
from statistics import fmean, median
from typing import Any

from robustness_runs import FCFS, SHIPPED, UNLOADED, run_name
from robustness_scenarios import Scenario

SAFE_RATIO, SAFE_SHARE, MAX_RATIO = 1.05, 0.95, 1.15
LOADED_FACTOR, LOADED_MEDIAN, CONTINUITY_DROP = 2.0, 0.7, 0.02
REGIONS = {
    "source": lambda p: p["source"],
    "arrivals": lambda p: p["arrival"],
    "users": lambda p: _bin(p["users"], (4, 8, 16, 32, 64)),
    "pool share": lambda p: "fits" if p["pool_share"] >= 1 else _bin(p["pool_share"], (0.25, 0.5, 1.0)),
    "barge-in": lambda p: _bin(p["barge_in_prob"], (0.0, 0.35, 0.7)),
    "prompts": lambda p: "spoken" if p["spoken"] else "text",
    "slot held": lambda p: "until heard" if p["hold_until_heard"] else "to last chunk",
}


def scenario_entry(scenario: Scenario, outcome: dict[str, Any]) -> dict[str, Any]:
    """The summary's entry of a scenario that ran (see the module's docstring for the three verdicts)."""
    runs, machines = outcome["runs"], range(outcome.get("machines", 1))
    fcfs, shipped = (_mean(runs, policy, machines, "ttfp_p90_ms") for policy in (FCFS, SHIPPED))
    unloaded = runs[UNLOADED]["ttfp_p90_ms"]
    entry = {"index": scenario.index, "parameters": parameters(scenario), **outcome}
    if None in (fcfs, shipped, unloaded) or not fcfs:
        return {**entry, "error": "a run has no audio TTFP"}
    continuity = [_mean(runs, policy, machines, "continuity") for policy in (SHIPPED, FCFS)]
    others = range(len(machines), 2 * len(machines))
    floor = _mean(runs, FCFS, others, "ttfp_p90_ms") if run_name(FCFS, others[0]) in runs else None
    return {**entry, "p90_ratio": shipped / fcfs, "loaded": fcfs >= LOADED_FACTOR * unloaded,
            "continuity_delta": None if None in continuity else continuity[0] - continuity[1],
            "floor_ratio": None if floor is None else floor / fcfs}


def _mean(runs: dict[str, dict], policy: str, machines: range, figure: str) -> float | None:
    """`figure`'s mean over `policy`'s runs on `machines` (None if a run lacks it)."""
    values = [runs[run_name(policy, machine)][figure] for machine in machines]
    return None if None in values else fmean(values)


def error_entry(scenario: Scenario, error: str) -> dict[str, Any]:
    return {"index": scenario.index, "parameters": parameters(scenario), "error": error}


def parameters(scenario: Scenario) -> dict[str, Any]:
    """The scenario as strict JSON (an infinite rate as "inf")."""
    fields = asdict(scenario)
    fields["request_rate"] = "inf" if math.isinf(scenario.request_rate) else scenario.request_rate
    return fields


def summarize(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Top-level aggregates and criteria over `entries` (scenario entries in order)."""
    ran = [e for e in entries if "error" not in e]
    ratios = [e["p90_ratio"] for e in ran]
    loaded = [e["p90_ratio"] for e in ran if e["loaded"]]
    deltas = [e["continuity_delta"] for e in ran if e["continuity_delta"] is not None]
    aggregates = {
        "num_scenarios": len(entries), "num_errors": len(entries) - len(ran), "num_loaded": len(loaded),
        "share_ratio_le_1_05": _share(ratios, SAFE_RATIO), "max_ratio": max(ratios, default=None),
        "median_ratio": median(ratios) if ratios else None,
        "loaded_median_ratio": median(loaded) if loaded else None,
        "min_continuity_delta": min(deltas, default=None),
    }
    floors = [e["floor_ratio"] for e in ran if e.get("floor_ratio") is not None]
    if floors:
        aggregates.update(floor_share_ratio_le_1_05=_share(floors, SAFE_RATIO), floor_max_ratio=max(floors),
                          floor_share_ratio_le_1_15=_share(floors, MAX_RATIO), floor_median_ratio=median(floors))
    return {**aggregates, "criteria": criteria(aggregates), "regions": regions(ran)}


def criteria(aggregates: dict[str, Any]) -> dict[str, bool | None]:
    """Issue 47's grid criteria, each true, false, or None where nothing could show it (no loaded scenario)."""
    share, top = aggregates["share_ratio_le_1_05"], aggregates["max_ratio"]
    loaded, drop = aggregates["loaded_median_ratio"], aggregates["min_continuity_delta"]
    verdicts = {
        "ratio_le_1_05_in_95pct": None if share is None else share >= SAFE_SHARE,
        "ratio_le_1_15_in_all": None if top is None else top <= MAX_RATIO,
        "loaded_median_le_0_7": None if loaded is None else loaded <= LOADED_MEDIAN,
        "continuity_drop_le_0_02": None if drop is None else drop >= -CONTINUITY_DROP,
    }
    return {**verdicts, "all_hold": aggregates["num_errors"] == 0 and all(verdicts.values())}


def regions(ran: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per dimension and value: scenarios, share with ratio <= 1.05, median and max ratio, loaded count."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for dimension, value_of in REGIONS.items():
        groups: dict[str, list[dict]] = {}
        for entry in ran:
            groups.setdefault(value_of(entry["parameters"]), []).append(entry)
        found[dimension] = {value: _region(group) for value, group in sorted(groups.items())}
    return found


def _region(group: list[dict[str, Any]]) -> dict[str, Any]:
    ratios = [e["p90_ratio"] for e in group]
    return {"scenarios": len(group), "loaded": sum(e["loaded"] for e in group),
            "share_ratio_le_1_05": _share(ratios, SAFE_RATIO), "median_ratio": median(ratios),
            "max_ratio": max(ratios)}


def _share(ratios: list[float], limit: float) -> float | None:
    return sum(r <= limit for r in ratios) / len(ratios) if ratios else None


def _bin(value: float, edges: tuple[float, ...]) -> str:
    """The bin of `value` between consecutive `edges` (each bin holds its upper edge; the first, both), "lo-hi"."""
    for lower, upper in zip(edges, edges[1:]):
        if value <= upper:
            return f"{lower:g}-{upper:g}"
    return f">{edges[-1]:g}"


def format_table(summary: dict[str, Any]) -> str:
    """The aggregates, the criteria and the regions, as a few aligned lines."""
    lines = [f"{key:<26} {_number(summary[key])}" for key in
             ("num_scenarios", "num_errors", "num_loaded", "share_ratio_le_1_05", "max_ratio", "median_ratio",
              "loaded_median_ratio", "min_continuity_delta", "floor_share_ratio_le_1_05",
              "floor_share_ratio_le_1_15", "floor_max_ratio", "floor_median_ratio") if key in summary]
    lines += [f"{'must hold: ' + key:<36} {verdict}" for key, verdict in summary["criteria"].items()]
    lines.append(f"{'region':<28} {'n':>4} {'loaded':>6} {'<=1.05':>7} {'median':>7} {'max':>6}")
    for dimension, values in summary["regions"].items():
        for value, region in values.items():
            lines.append(f"{dimension + ': ' + value:<28} {region['scenarios']:>4} {region['loaded']:>6} "
                         f"{region['share_ratio_le_1_05']:>7.2f} {region['median_ratio']:>7.2f} "
                         f"{region['max_ratio']:>6.2f}")
    return "\n".join(lines)


def _number(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def plot_ratios(entries: list[dict[str, Any]], path: Path) -> None:
    """The distribution of P90 ratios, loaded and not: a histogram and the CDF, the criteria's lines drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [e for e in entries if "error" not in e]
    groups = {"loaded": [e["p90_ratio"] for e in ran if e["loaded"]],
              "not loaded": [e["p90_ratio"] for e in ran if not e["loaded"]]}
    figure, (histogram, cdf) = plt.subplots(1, 2, figsize=(11, 4))
    histogram.hist(list(groups.values()), bins=30, stacked=True, label=list(groups))
    for label, ratios in groups.items():
        ordered = sorted(ratios)
        cdf.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post", label=label)
    floors = sorted(e["floor_ratio"] for e in ran if e.get("floor_ratio") is not None)
    if floors:
        cdf.step(floors, [(i + 1) / len(floors) for i in range(len(floors))], where="post", color="grey",
                 label="FCFS+LRU on other machines / FCFS+LRU")
    for axis in (histogram, cdf):
        for limit, style in ((SAFE_RATIO, "--"), (MAX_RATIO, ":"), (LOADED_MEDIAN, "-.")):
            axis.axvline(limit, color="grey", linestyle=style, linewidth=1)
        axis.set_xlabel("P90 audio TTFP, shipped / FCFS+LRU")
        axis.legend()
    histogram.set_ylabel("scenarios")
    cdf.set_ylabel("share of scenarios")
    figure.suptitle(f"robustness grid: {len(ran)} simulated scenarios")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
