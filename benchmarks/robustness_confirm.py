"""Confirming the simulated grid for real: the worst K scenarios by P90 ratio and K others drawn at random
run again as real replays (a fresh tiny-omni-cpu server on 127.0.0.1 a run, stages in processes), FCFS+LRU
and the shipped policies back to back, alternating which goes first, with the pools the simulation used; `pairs`
such pairs a scenario, whose real ratio is the median of the pairs' ratios (where 48-52 users crowd the server,
one build's FCFS+LRU P90 moved 2x between two runs, so one pair says little there).

Each confirmation is written to DIR/confirm.json as it finishes (one that is there is not run again):
`index`, `reason` (worst | random), `simulated_ratio`, `real_ratio`, `difference` (real - simulated),
`agrees` (|difference| <= AGREEMENT), `pairs` (each pair's `ratio` and real runs' figures, with their wall
times), and the whole confirmation's wall time. Issue 47 wants every confirmation to agree.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from robustness_runs import FCFS, SHIPPED, replay, replay_options, run_figures
from robustness_scenarios import Scenario
from robustness_workloads import Workload

AGREEMENT = 0.15


def pick(entries: list[dict[str, Any]], k: int, seed: int) -> list[tuple[str, dict[str, Any]]]:
    """The K entries with the highest ratio, then K of the others drawn by `seed`, as (reason, entry)."""
    ran = sorted((e for e in entries if "error" not in e), key=lambda e: e["p90_ratio"], reverse=True)
    worst, others = ran[:k], ran[k:]
    drawn = random.Random(seed).sample(others, min(k, len(others)))
    return [("worst", e) for e in worst] + [("random", e) for e in drawn]


def confirm(entries: list[dict[str, Any]], scenarios: list[Scenario], workloads: dict[int, Workload], k: int,
            seed: int, out: Path, shipped_set: tuple[str, ...] = (), pairs: int = 1) -> dict[str, Any]:
    """Run the picks for real (those not in DIR/confirm.json yet) and return the confirmations' verdict."""
    path = out / "confirm.json"
    done = {c["index"]: c for c in json.loads(path.read_text())} if path.is_file() else {}
    by_index = {s.index: s for s in scenarios}
    for number, (reason, entry) in enumerate(pick(entries, k, seed)):
        if entry["index"] not in done:
            scenario = by_index[entry["index"]]
            print(f"confirming scenario {scenario.index} ({reason}) for real", file=sys.stderr, flush=True)
            done[scenario.index] = confirm_one(scenario, workloads[scenario.index], entry, reason, number % 2 == 1,
                                              shipped_set, pairs)
            path.write_text(json.dumps(list(done.values()), indent=1))
    differences = [abs(c["difference"]) for c in done.values() if c["difference"] is not None]
    return {"num_confirmed": len(done), "max_abs_difference": max(differences, default=None),
            "all_agree": bool(done) and all(c["agrees"] for c in done.values())}


def confirm_one(scenario: Scenario, workload: Workload, entry: dict[str, Any], reason: str,
                shipped_first: bool, shipped_set: tuple[str, ...] = (), pairs: int = 1) -> dict[str, Any]:
    """`pairs` real pairs, each in the other order than the one before; the real ratio is their ratios' median."""
    started = time.perf_counter()
    done = [run_pair(scenario, workload, entry, shipped_first != (number % 2 == 1), shipped_set)
            for number in range(pairs)]
    ratios = [pair["ratio"] for pair in done]
    real = None if None in ratios else statistics.median(ratios)
    difference = None if real is None else real - entry["p90_ratio"]
    return {"index": scenario.index, "reason": reason, "simulated_ratio": entry["p90_ratio"], "real_ratio": real,
            "difference": difference, "agrees": difference is not None and abs(difference) <= AGREEMENT,
            "pairs": done, "wall_s": round(time.perf_counter() - started, 1)}


def run_pair(scenario: Scenario, workload: Workload, entry: dict[str, Any], shipped_first: bool,
             shipped_set: tuple[str, ...]) -> dict[str, Any]:
    """Both policies' real runs, back to back, and the ratio of their P90s (None where one has none)."""
    runs = {}
    for policy in ((SHIPPED, FCFS) if shipped_first else (FCFS, SHIPPED)):
        run_started = time.perf_counter()
        result = replay(replay_options(scenario, workload, policy, entry["pools"], None, shipped_set))
        runs[policy] = {**run_figures(result), "wall_s": round(time.perf_counter() - run_started, 1)}
    fcfs, shipped = runs[FCFS]["ttfp_p90_ms"], runs[SHIPPED]["ttfp_p90_ms"]
    return {"ratio": shipped / fcfs if fcfs and shipped is not None else None, "runs": runs}
