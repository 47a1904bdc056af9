"""Tables (markdown) from the result JSONs of benchmarks/duplex_window.sh.

Usage: python benchmarks/duplex_summary.py benchmarks/results/duplex > summary.md
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path

HALF_BUDGET = 0.5  # schedulable: overall p99 frame latency under half the frame period, and no stall


def load(directory: Path) -> dict[str, dict]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))}


def plateau(result: dict) -> float:
    """Median occupancy over the second half of the run."""
    timeline = result["occupancy"]
    end = timeline[-1][0]
    return statistics.median(occ for t, occ in timeline if t >= end / 2)


def schedulable(result: dict) -> bool:
    p99 = result["frame_latency_overall_ms"]["p99"]
    return result["stalled_sessions"] == 0 and p99 is not None and p99 < HALF_BUDGET * result["config"]["frame_ms"]


def fmt(value, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def window_table(results: dict[str, dict]) -> list[str]:
    rows = ["| run | stalled sessions | peak occupancy | plateau | t_sat predicted (s) | t_sat measured (s) | error | p99 frame latency (ms) |",
            "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if not re.match(r"(unbounded|window)_n\d+(_\d+)?$", name):
            continue
        predicted, measured = r["t_sat_predicted_s"], r["t_sat_measured_s"]
        error = f"{100 * (predicted - measured) / measured:+.1f} %" if predicted and measured else "n/a"
        rows.append(f"| {name} | {r['stalled_sessions']} | {r['peak_occupancy']:.3f} | {plateau(r):.3f} | "
                    f"{fmt(predicted)} | {fmt(measured)} | {error} | {fmt(r['frame_latency_overall_ms']['p99'])} |")
    return rows


def sweep_verdicts(results: dict[str, dict]) -> tuple[list, dict[int, bool]]:
    """The sweep runs (N, name, result), sorted, and per N whether every run of it is schedulable."""
    runs = sorted((int(m[1]), name, r) for name, r in results.items() if (m := re.match(r"sweep_n(\d+)(_\d+)?$", name)))
    verdict: dict[int, bool] = {}
    for n, _, r in runs:
        verdict[n] = verdict.get(n, True) and schedulable(r)
    return runs, verdict


def largest_schedulable(results: dict[str, dict]) -> int | None:
    """N*: the largest N up to which every N swept is schedulable in every run."""
    _, verdict = sweep_verdicts(results)
    best = None
    for n in sorted(verdict):
        if not verdict[n]:
            break
        best = n
    return best


def sweep_table(results: dict[str, dict]) -> list[str]:
    """One row per run (sweep_n<N> and repeats sweep_n<N>_<k>); N is schedulable when every run of it is."""
    rows = ["| N | run | frames/s | p50 | p99 | max (ms) | stalled | schedulable |", "|---|---|---|---|---|---|---|---|"]
    runs, verdict = sweep_verdicts(results)
    for n, name, r in runs:
        lat = r["frame_latency_overall_ms"]
        rows.append(f"| {n} | {name} | {r['frames_per_s']:.1f} | {fmt(lat['p50'])} | {fmt(lat['p99'])} | {fmt(lat['max'])} | "
                    f"{r['stalled_sessions']} | {'yes' if schedulable(r) else 'no'} |")
    best = max((n for n, ok in verdict.items() if ok), default=None)
    return rows + ["", f"Largest schedulable N: {best}; N* (largest N up to which every N swept is schedulable "
                       f"in every run): {largest_schedulable(results)}"]


def ramp_table(results: dict[str, dict]) -> list[str]:
    """Per ramp run: where AIMD settled against N* (within 10 %), and the settled frames' p99 against
    half the frame budget."""
    n_star = largest_schedulable(results)
    rows = [f"N* from the sweep: {n_star}", "",
            "| run | offered | admitted | rejected | settled cap | settled live | within 10 % of N* | stalled | "
            "p99 run (ms) | p99 settled (ms) | under half budget | peak occupancy |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        if not name.startswith("ramp_"):
            continue
        ramp = r["ramp"]
        live, p99 = ramp["settled_live"], (ramp.get("settled_latency_ms") or {}).get("p99")
        near = "n/a" if n_star is None or live is None else ("yes" if abs(live - n_star) <= 0.1 * n_star else "no")
        under = "n/a" if p99 is None else ("yes" if p99 < HALF_BUDGET * r["config"]["frame_ms"] else "no")
        rows.append(f"| {name} | {ramp['offered']} | {ramp['admitted']} | {ramp['rejected']} | {fmt(ramp['settled_cap'])} | "
                    f"{fmt(live)} | {near} | {r['stalled_sessions']} | {fmt(r['frame_latency_overall_ms']['p99'])} | "
                    f"{fmt(p99)} | {under} | {r['peak_occupancy']:.3f} |")
    return rows


def main(directory: str) -> None:
    results = load(Path(directory))
    for title, table in (("Bounded window vs unbounded", window_table), ("Fixed-N sweep (windowed)", sweep_table),
                         ("AIMD ramp", ramp_table)):
        print(f"## {title}\n")
        print("\n".join(table(results)))
        print()


if __name__ == "__main__":
    main(sys.argv[1])
