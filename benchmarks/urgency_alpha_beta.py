"""Sweep the urgency policy's alpha and beta on a synthetic voice workload (see playback_sim.py).

The U2 utility is U = beta * K * R_occ - alpha * max(0, P - P_safe) / P_safe, and only
its order matters: scaling alpha and beta together changes nothing, so the grid
(default {0, 0.25, 0.5, 1, 2, 4} squared) holds one policy per ratio alpha/beta, plus
alpha = 0 (KV relief only), beta = 0 (exposure only) and both 0 (U2 in the order
given). Each distinct policy runs once per seed and scenario and fills every grid
cell with its ratio; fcfs runs alongside for reference. P_safe, P_yield and P_max
stay at their defaults (400, 1000 and 2000 ms; the results quoted below were taken
with P_max 4000 ms served when nothing else was ready, and no P_yield).

The workload: 56 multi-turn sessions (2-5 turns) arriving over 20 s, prompts of
20-100 tokens, replies of 8-120 tokens (log-uniform) at 240 ms of audio per token,
30 % of replies cut by a barge-in, 0.5-3 s between turns. One thinker stage, 128
tokens per round, a round costing 25 ms + 1.5 ms per batched token, 16-token KV blocks:
- `compute`: 16 seqs per round, 640 blocks: bursts of compute overload.
- `seats`: 8 seqs per round, rounds of 12 ms + 1.5 ms per token: replies compete for seats.
- `kv`: 16 seqs per round, 480 blocks: idle contexts, and some active ones, are preempted.

Every run of a seed sees the same sessions, so settings are compared seed by seed:
the second table is the mean paired difference from the shipped default with its
standard error, flagged only beyond twice that error. There are ~60 comparisons per
scenario, so expect a few flags by chance: trust patterns across neighbouring ratios.

    .venv/bin/python benchmarks/urgency_alpha_beta.py [--seeds 16] [--jobs 2] [--json PATH]

What 32 seeds showed (2026-11-23; details in benchmarks/log/2026-11-lab-log.md): alpha/beta hardly
moves total underrun time, first-audio latency, waste or preemptions, but ratios of 4
and above (beta = 0 included) cut the share of replies with any underrun (compute
3.2 % -> 1.5-2.0 %, kv 25 % -> 18-21 %; same direction, within noise, in `seats`)
and are no worse on anything. At alpha = beta the KV term (K in blocks) outweighs the exposure term 2-4
to 1, so the default orders U2 mostly by KV held, and that bought no KV relief here.
The data favours alpha/beta of about 4-8 (e.g. alpha 1, beta 0.25) over 1:1, so the
shipped default is alpha 1, beta 0.25.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from dataclasses import asdict
from fractions import Fraction
from multiprocessing import Pool
from pathlib import Path

from playback_sim import SimResult, Simulation, StageModel, Workload, draw_sessions

from stages.config import SchedulerConfig
from stages.policies.urgency import UrgencyParams

SCENARIOS = {  # name: (workload, stage, what it stresses)
    "compute": (Workload(), StageModel(kv_blocks=640), "16 seqs per round, 640 KV blocks: compute bursts"),
    "seats": (Workload(), StageModel(max_num_seqs=8, step_base_s=0.012, kv_blocks=640),
              "8 seqs per round, cheaper rounds: replies compete for seats"),
    "kv": (Workload(), StageModel(kv_blocks=480), "16 seqs per round, 480 KV blocks: KV pressure, preemption"),
}
DEFAULT = (UrgencyParams().alpha, UrgencyParams().beta)  # the shipped defaults
COLUMNS = [  # (figure, label, decimals); lower is better for all but kv_occ
    ("underrun_pct", "underrun%", 3), ("replies_underrun_pct", "replies_und%", 1), ("ttfa_p50_s", "ttfa_p50_s", 2),
    ("ttfa_p90_s", "ttfa_p90_s", 2), ("waste_pct", "waste%", 1), ("preemptions", "preempt", 1),
    ("active_preemptions", "active_pre", 1), ("recompute_pct", "recompute%", 1), ("kv_occupancy_mean", "kv_occ", 2)]
DELTAS = ("underrun_pct", "replies_underrun_pct", "ttfa_p90_s", "waste_pct", "active_preemptions")


def percentile(values: list[float], q: float) -> float:
    """The q-quantile by nearest rank (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summarize(result: SimResult) -> dict[str, float]:
    """A run's figures. Underrun: stalled time over playback time (first audio to the end of
    playback or the barge-in), summed over replies; waste: tokens generated but never heard."""
    replies = result.replies
    played = [r for r in replies if r.first_audio_at is not None]
    playback_s = sum(r.ended_at - r.first_audio_at for r in played)
    stall_s = sum(r.stall_s for r in played)
    generated = sum(r.num_generated for r in replies)
    samples = max(1, result.u2_samples)
    return {
        "replies": len(replies),
        "underrun_pct": 100.0 * stall_s / playback_s if playback_s else 0.0,
        "underrun_s": stall_s,
        "replies_underrun_pct": 100.0 * sum(r.stall_s > 0.001 for r in played) / max(1, len(played)),
        "ttfa_p50_s": percentile([r.first_audio_at - r.started_at for r in played], 0.5),
        "ttfa_p90_s": percentile([r.first_audio_at - r.started_at for r in played], 0.9),
        "wasted_tokens": sum(r.num_wasted for r in replies),
        "waste_pct": 100.0 * sum(r.num_wasted for r in replies) / generated if generated else 0.0,
        "preemptions": result.num_preemptions,
        "active_preemptions": result.num_active_preemptions,
        "recompute_pct": 100.0 * result.num_recomputed / result.num_computed if result.num_computed else 0.0,
        "active_recompute_pct": (100.0 * result.num_active_recomputed / result.num_computed
                                 if result.num_computed else 0.0),
        "kv_occupancy_mean": result.kv_occupancy_s / result.busy_s if result.busy_s else 0.0,
        "busy_s": result.busy_s,
        "end_s": result.end_s,
        "failed": result.num_failed,
        "u2_kv_term_mean": result.u2_kv_term / samples,
        "u2_exposure_term_mean": result.u2_exposure_term / samples,
    }


def setting_key(alpha: float, beta: float) -> str:
    """The policy a grid cell runs: settings with the same key order U2 identically."""
    if alpha == 0 and beta == 0:
        return "given order"
    if alpha == 0:
        return "beta only"
    if beta == 0:
        return "alpha only"
    ratio = Fraction(alpha).limit_denominator(1000) / Fraction(beta).limit_denominator(1000)
    return f"a/b={ratio}"


def key_rank(key: str) -> float:
    """Table order: given order, beta only, increasing alpha/beta, alpha only."""
    ranks = {"given order": -2.0, "beta only": -1.0, "alpha only": math.inf}
    return ranks[key] if key in ranks else float(Fraction(key.removeprefix("a/b=")))


def run_one(task: tuple[str, str, float, float, int]) -> tuple[str, str, int, dict[str, float]]:
    scenario, key, alpha, beta, seed = task
    workload, stage, _ = SCENARIOS[scenario]
    params = None if key == "fcfs" else UrgencyParams(alpha=alpha, beta=beta)
    config = SchedulerConfig(policy="fcfs" if key == "fcfs" else "urgency", params=params,
                             max_num_seqs=stage.max_num_seqs, max_num_batched_tokens=stage.max_num_batched_tokens)
    simulation = Simulation(draw_sessions(workload, seed), workload, stage, config)
    return scenario, key, seed, summarize(simulation.run())


def paired(runs: dict[int, dict], default: dict[int, dict], metric: str) -> tuple[float, float]:
    """Mean and standard error of the per-seed difference from the default."""
    diffs = [runs[seed][metric] - default[seed][metric] for seed in runs]
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    return statistics.fmean(diffs), se


def compare(diff: float, se: float) -> str:
    """'worse' / 'better' than the default when the paired difference exceeds 2 SE (lower is better)."""
    if diff == 0 or abs(diff) <= 2 * se:
        return ""
    return "worse" if diff > 0 else "better"


def ordered_keys(results: dict) -> list[str]:
    return ["fcfs"] + sorted((k for k in results if k != "fcfs"), key=key_rank)


def report(scenario: str, results: dict[str, dict[int, dict]], grid: list[float]) -> list[str]:
    default_key = setting_key(*DEFAULT)
    default = results[default_key]
    lines = [f"\n== {scenario}: {SCENARIOS[scenario][2]}  (* = the default, alpha {DEFAULT[0]:g}, beta {DEFAULT[1]:g})",
             f"{'setting':13}" + "".join(f"{label:>{max(len(label), 6) + 1}}" for _, label, _ in COLUMNS)]
    for key in ordered_keys(results):
        means = {m: statistics.fmean(r[m] for r in results[key].values()) for m, _, _ in COLUMNS}
        lines.append(f"{key + (' *' if key == default_key else ''):13}" + "".join(
            f"{means[m]:{max(len(label), 6) + 1}.{decimals}f}" for m, label, decimals in COLUMNS))
    lines.append(f"paired difference from the default, mean ± standard error over seeds ('<' better, '>' worse "
                 "beyond 2 SE)")
    lines.append(f"{'setting':13}" + "".join(f"{name:>22}" for name in DELTAS))
    notes: dict[str, list[str]] = {"better": [], "worse": []}
    for key in ordered_keys(results):
        if key == default_key:
            continue
        row = f"{key:13}"
        for metric in DELTAS:
            diff, se = paired(results[key], default, metric)
            verdict = compare(diff, se)
            row += f"{diff:+13.3f} ±{se:6.3f}{'<' if verdict == 'better' else '>' if verdict == 'worse' else ' '}"
            if verdict and key != "fcfs":
                notes[verdict].append(f"{key} on {metric}")
        lines.append(row)
    for verdict, found in notes.items():
        lines.append(f"urgency settings {verdict} than the default: {', '.join(found) or 'none'}")
    lines.append(f"underrun % (rows alpha, columns beta, {grid}):")
    for alpha in grid:
        cells = [statistics.fmean(r["underrun_pct"] for r in results[setting_key(alpha, beta)].values())
                 for beta in grid]
        lines.append(f"  alpha {alpha:<5g}" + "".join(f"{c:8.3f}" for c in cells))
    kv = statistics.fmean(r["u2_kv_term_mean"] for r in default.values())
    exposure = statistics.fmean(r["u2_exposure_term_mean"] for r in default.values())
    lines.append(f"the two terms of U over U2 requests holding KV (default runs): mean K * R_occ = {kv:.1f}, "
                 f"mean (P - P_safe) / P_safe = {exposure:.2f}: at alpha = beta they weigh {kv / exposure:.1f} : 1")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--grid", type=float, nargs="+", default=[0.0, 0.25, 0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--scenarios", nargs="+", choices=sorted(SCENARIOS), default=sorted(SCENARIOS))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, help="also write every run's figures here")
    args = parser.parse_args()
    grid = sorted(set(args.grid) | set(DEFAULT))
    settings = {setting_key(a, b): (a, b) for b in grid for a in grid}  # one representative per policy
    settings["fcfs"] = DEFAULT
    tasks = [(scenario, key, a, b, seed) for scenario in args.scenarios for key, (a, b) in settings.items()
             for seed in range(args.seeds)]
    started = time.perf_counter()
    results: dict[str, dict[str, dict[int, dict]]] = {s: {k: {} for k in settings} for s in args.scenarios}
    with Pool(args.jobs) as pool:
        for scenario, key, seed, summary in pool.imap_unordered(run_one, tasks, chunksize=4):
            results[scenario][key][seed] = summary
    elapsed = time.perf_counter() - started
    print(f"{len(tasks)} runs ({len(settings) - 1} distinct urgency settings + fcfs, {args.seeds} seeds, "
          f"{len(args.scenarios)} scenarios) in {elapsed:.0f} s on {args.jobs} processes")
    for scenario in args.scenarios:
        print("\n".join(report(scenario, results[scenario], grid)))
    if args.json is not None:
        meta = {"grid": grid, "seeds": args.seeds, "default": DEFAULT, "elapsed_s": elapsed,
                "python": platform.python_version(), "machine": platform.machine(),
                "scenarios": {s: {"workload": asdict(SCENARIOS[s][0]), "stage": asdict(SCENARIOS[s][1]),
                                  "about": SCENARIOS[s][2]} for s in args.scenarios},
                "cells": {f"{a:g},{b:g}": setting_key(a, b) for a in grid for b in grid}}
        args.json.write_text(json.dumps({"setup": meta, "runs": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
