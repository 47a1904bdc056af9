"""Issue 47's table in the simulator: its regimes on fresh ShareGPT samples, FCFS+LRU against the shipped policies.

    .venv/bin/python benchmarks/robustness_regimes.py --seeds 101,102,103 --out DIR [--trace]

The regimes of the issue's table (its real runs: tiny-omni-cpu, stages in processes, a fresh server a run, on
a held-out ShareGPT-format sample): 48 voice users (a slot held until the reply is heard), 128 requests arriving
at 8/s, barge-in 0.5; 48 voice users starting together, 96 requests, barge-in 0.5, with its first 48 requests
(the burst) and the 48 after apart; light load: 96 requests, 12 in flight, a slot freed at the last audio chunk,
barge-in 0.5. Each runs here in the simulator (`--spec`, tiny-omni-cpu fitted to this machine) on ShareGPT
samples drawn as vLLM draws them with each of `--seeds` (the project's own traces take seed 7), the pools as
served. Prints the simulated figures beside the issue's real ones and writes DIR/regimes.json and each run's
result JSON; `--trace` also writes each run's step traces (`runtime.trace_dir`) into DIR.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from robustness_runs import FCFS, SHIPPED, SIM_SPEC, quiet_forecast
from robustness_workloads import SHAREGPT_PATH

from lab.metrics import CANCELLED, FINISHED, summarize
from lab.replay.options import ReplayOptions
from lab.sim.replay import run_simulated_replay
from liveserve.config.document import Override

BURST = 48
REGIMES = {
    "arrivals": {"num_requests": 128, "request_rate": 8.0, "max_concurrency": 48, "hold_until_heard": True},
    "burst": {"num_requests": 96, "request_rate": math.inf, "max_concurrency": 48, "hold_until_heard": True},
    "light": {"num_requests": 96, "request_rate": math.inf, "max_concurrency": 12, "hold_until_heard": False},
}
PARTS = {"arrivals": {"all": slice(None)}, "light": {"all": slice(None)},
         "burst": {"all": slice(None), "first 48": slice(None, BURST), "after 48": slice(BURST, None)}}
ISSUE_REAL = {  # (FCFS+LRU P90, shipped P90) in ms, the issue's table; light load: two pairs
    ("arrivals", "all"): [(191, 53)], ("burst", "all"): [(332, 342)], ("burst", "first 48"): [(344, 424)],
    ("burst", "after 48"): [(73, 49)], ("light", "all"): [(83, 114), (101, 103)],
}


def regime_options(regime: str, seed: int, policy: str, spec: str, trace_dir: Path | None) -> ReplayOptions:
    overrides = (Override(("runtime", "trace_dir"), str(trace_dir)),) if trace_dir is not None else ()
    return ReplayOptions(dataset="sharegpt", dataset_path=SHAREGPT_PATH, seed=seed, barge_in_prob=0.5,
                         policy=policy, simulate=spec, overrides=overrides, **REGIMES[regime])


def part_figures(result: dict, part: slice) -> dict:
    """P50 / P90 audio TTFP and continuity over a slice of the requests in order of release (a burst's first
    sessions are released in the workload's order), served ones only."""
    served = [r for r in result["requests"][part] if r["status"] in FINISHED or r["status"] == CANCELLED]
    ttfp = summarize(r["audio_ttfp_ms"] for r in served)
    ok = [r["continuity_ok"] for r in served]
    return {"p50": ttfp["p50"], "p90": ttfp["p90"], "continuity": sum(ok) / len(ok) if ok else None,
            "requests": len(served)}


def run_regimes(seeds: list[int], spec: str, out: Path, trace: bool) -> list[dict]:
    rows = []
    for seed in seeds:
        for regime in REGIMES:
            results = {}
            for policy in (FCFS, SHIPPED):
                name = f"{regime}-{seed}-{policy}"
                options = regime_options(regime, seed, policy, spec, out / f"trace-{name}" if trace else None)
                with open(os.devnull, "w") as quiet:
                    results[policy] = run_simulated_replay(options, log=quiet)
                (out / f"{name}.json").write_text(json.dumps(results[policy]))
            for part, indices in PARTS[regime].items():
                figures = {policy: part_figures(result, indices) for policy, result in results.items()}
                rows.append({"regime": regime, "part": part, "seed": seed, **figures,
                             "ratio": figures[SHIPPED]["p90"] / figures[FCFS]["p90"]})
            print(f"{regime} seed {seed}: done", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| regime | sample seed | FCFS+LRU p50 / P90 (ms) | shipped p50 / P90 (ms) | ratio | continuity F / S "
             "| issue, real: FCFS / shipped P90 (ratio) |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        fcfs, shipped = row[FCFS], row[SHIPPED]
        real = ", ".join(f"{f} / {s} ({s / f:.2f})" for f, s in ISSUE_REAL[(row["regime"], row["part"])])
        lines.append(f"| {row['regime']} {row['part']} | {row['seed']} | {fcfs['p50']:.0f} / {fcfs['p90']:.0f} | "
                     f"{shipped['p50']:.0f} / {shipped['p90']:.0f} | **{row['ratio']:.2f}** | "
                     f"{fcfs['continuity']:.2f} / {shipped['continuity']:.2f} | {real} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="101,102,103", help="ShareGPT sample seeds, comma-separated")
    parser.add_argument("--spec", default=SIM_SPEC)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trace", action="store_true", help="write each run's step traces")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with quiet_forecast():
        rows = run_regimes([int(s) for s in args.seeds.split(",")], args.spec, args.out, args.trace)
    (args.out / "regimes.json").write_text(json.dumps(rows, indent=1))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
