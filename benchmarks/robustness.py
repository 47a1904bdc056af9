"""Issue 47's randomized grid nobody can tune to: FCFS+LRU against the shipped policies over seeded scenarios.

    .venv/bin/python benchmarks/robustness.py --seed S --scenarios 200 --out DIR [--workers 2] [--confirm K]

Draws `--scenarios` scenarios of grid `--seed` (benchmarks/robustness_scenarios.py; without --seed one is drawn
and printed: any new seed is a fresh grid), writes each one's sample (benchmarks/robustness_workloads.py), and
runs each in the simulator (`--spec`, tiny-omni-cpu fitted to this 2-core machine): FCFS+LRU and the shipped
policies on the same plan, and FCFS+LRU unloaded (benchmarks/robustness_runs.py). Scenarios run in `--workers`
processes: the simulator's time is virtual, so sharing the cores changes how long a run takes, not its figures.

DIR gets `summary.json` (the seed, spec, the wall time of this invocation's runs, the aggregates and issue 47's
criteria, the regions, and `scenarios`: one entry a scenario with its `parameters`, `p90_ratio`, `loaded`,
`continuity_delta`, `pools`, `working_set` and each run's figures; see benchmarks/robustness_summary.py), `ratios.png`,
and `scenarios/NNN/` (the sample and `entry.json`; a scenario whose entry.json is there with the same parameters
is not run again, so an interrupted grid resumes). `--keep-runs` keeps every run's whole result JSON there,
`--trace` every run's step traces (scenarios/NNN/trace/RUN/), and `--only I,J` runs those scenarios of the grid
alone (to look at one scenario's steps: `--seed S --only 17 --trace --out ANOTHER_DIR`).
`--confirm K` then re-runs the worst K and a random K scenarios for real (benchmarks/robustness_confirm.py), each as
`--confirm-pairs P` real pairs (default 1) whose median ratio is compared.
`--max-requests N` caps each scenario's requests (a quick run, not the grid). `--machines K` runs both
policies on K draws of the simulated machine's step noise and compares their mean P90s; `--floor` runs FCFS+LRU
on K more machines, so that each scenario's `floor_ratio` says how far the machine alone moves its P90 (a P90
over 16 requests on a noisy machine moves far: benchmarks/log/2026-11-30-grid-noise-floor.md).
`--set KEY.PATH=VALUE` (repeatable) changes the shipped policies' runs only (e.g.
`--set stages.thinker.scheduler.urgency.pace_kv_share=0.5`): a variant against the same FCFS+LRU, recorded as the
summary's and each entry's `set`. `--baseline DIR` takes FCFS+LRU's runs and the pools of each scenario from the
entry of an earlier grid of the same seed in DIR, where it ran on as many machines, and runs only the shipped
policies (a variant costs a third of a grid); a scenario without such an entry runs whole. Exit status: 0 when
every criterion holds, 1 when one does not, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context
from pathlib import Path

from robustness_confirm import confirm
from robustness_runs import ROOT, SIM_SPEC, quiet_forecast, run_scenario
from robustness_scenarios import Scenario, draw_scenarios
from robustness_summary import error_entry, format_table, parameters, plot_ratios, scenario_entry, summarize
from robustness_workloads import SHAREGPT_PATH, Workload, sharegpt_pool, write_workload

from liveserve.config.document import Override
from liveserve.config.reader import ConfigError


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    seed = secrets.randbelow(2**31) if args.seed is None else args.seed
    print(f"grid seed {seed}, {args.scenarios} scenarios, spec {args.spec}", file=sys.stderr)
    scenarios = [_capped(s, args.max_requests) for s in draw_scenarios(seed, args.scenarios)
                 if args.only is None or s.index in args.only]
    if any(s.source == "sharegpt" for s in scenarios) and not SHAREGPT_PATH.is_file():
        print(f"error: {SHAREGPT_PATH} is missing: run benchmarks/prepare_sharegpt.py first", file=sys.stderr)
        return 2
    workloads = prepare(scenarios, seed, args.out)
    started = time.perf_counter()
    entries = run_grid(scenarios, workloads, args)
    wall_s = round(time.perf_counter() - started)
    summary = {"seed": seed, "spec": _shown(args.spec), "set": args.set, "workers": args.workers, "wall_s": wall_s,
               **summarize(entries), "scenarios": entries}
    write_summary(args.out, summary)
    print(format_table(summary))
    if args.confirm:
        summary["confirmations"] = confirm(entries, scenarios, workloads, args.confirm, seed, args.out,
                                           tuple(args.set), args.confirm_pairs)
        write_summary(args.out, summary)
    return 0 if summary["criteria"]["all_hold"] else 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, help="the grid's seed (default: drawn now, and printed)")
    parser.add_argument("--scenarios", type=int, default=200)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=1, help="scenarios simulated at once, in processes")
    parser.add_argument("--spec", default=SIM_SPEC, help="the simulation spec")
    parser.add_argument("--confirm", type=int, default=0, metavar="K", help="re-run the worst K and a random K "
                        "scenarios for real (a fresh server on 127.0.0.1 a run; minutes each)")
    parser.add_argument("--confirm-pairs", type=int, default=1, metavar="P", help="real pairs a confirmation runs; "
                        "its ratio is their median (default 1)")
    parser.add_argument("--max-requests", type=int, help="at most this many requests a scenario (a quick run)")
    parser.add_argument("--keep-runs", action="store_true", help="keep every run's result JSON")
    parser.add_argument("--trace", action="store_true", help="write every run's step traces")
    parser.add_argument("--only", type=lambda text: {int(i) for i in text.split(",")}, metavar="I,J",
                        help="run only these scenarios of the grid")
    parser.add_argument("--machines", type=int, default=1, metavar="K",
                        help="simulated machines (step noise draws) each policy runs on; ratios of mean P90s")
    parser.add_argument("--floor", action="store_true",
                        help="also run FCFS+LRU on K other machines: each scenario's noise floor")
    parser.add_argument("--set", action="append", default=[], metavar="KEY.PATH=VALUE",
                        help="a setting of the shipped policies' runs only (repeatable)")
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="an earlier grid of this seed whose FCFS+LRU runs and pools each scenario reuses")
    args = parser.parse_args(argv)
    for name in ("scenarios", "workers", "max_requests", "machines", "confirm_pairs"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    for text in args.set:
        try:
            Override.parse(text)
        except ConfigError as exc:
            parser.error(str(exc))
    if args.baseline is not None and not (args.baseline / "scenarios").is_dir():
        parser.error(f"--baseline {args.baseline}: no grid there (no scenarios/ folder)")
    return args


def _shown(spec: str) -> str:
    """A spec inside the repository by its path from there (a summary names no folder of this machine)."""
    path = Path(spec).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else spec


def _capped(scenario: Scenario, max_requests: int | None) -> Scenario:
    if max_requests is None or scenario.total_requests <= max_requests:
        return scenario
    return replace(scenario, num_requests=max(1, max_requests // scenario.turns))


def prepare(scenarios: list[Scenario], seed: int, out: Path) -> dict[int, Workload]:
    """Every scenario's sample, written into its folder (ShareGPT's drawn from one pool of the grid's seed)."""
    pool = sharegpt_pool(seed) if any(s.source == "sharegpt" for s in scenarios) else []
    return {s.index: write_workload(s, scenario_dir(out, s.index), pool) for s in scenarios}


def scenario_dir(out: Path, index: int) -> Path:
    return out / "scenarios" / f"{index:03d}"


def run_grid(scenarios: list[Scenario], workloads: dict[int, Workload], args: argparse.Namespace) -> list[dict]:
    """Each scenario's entry, in order: the one already in its folder, or a new run's."""
    entries = {s.index: entry for s in scenarios if (entry := _done(args, s)) is not None}
    todo = [s for s in scenarios if s.index not in entries]
    jobs = [(s, workloads[s.index], args.spec, scenario_dir(args.out, s.index), args.keep_runs, args.trace,
             args.machines, args.floor, tuple(args.set), _baseline(args, s)) for s in todo]
    if args.workers == 1:
        results = map(simulate_scenario, *zip(*jobs)) if jobs else []
    else:
        executor = ProcessPoolExecutor(args.workers, mp_context=get_context("spawn"))
        results = executor.map(simulate_scenario, *zip(*jobs)) if jobs else []
    for count, entry in enumerate(results, start=1):
        entries[entry["index"]] = entry
        print(f"[{count}/{len(todo)}] {_progress(entry)}", file=sys.stderr, flush=True)
    if args.workers > 1:
        executor.shutdown()
    return [entries[s.index] for s in scenarios]


def _done(args: argparse.Namespace, scenario: Scenario) -> dict | None:
    """The entry already in the scenario's folder, if it ran with the same parameters, machines, floor and set."""
    entry = _entry(args.out, scenario)
    same = (entry is not None and entry.get("machines", 1) == args.machines
            and (entry.get("floor_ratio") is not None) == args.floor and entry.get("set", []) == args.set)
    return entry if same else None


def _baseline(args: argparse.Namespace, scenario: Scenario) -> dict | None:
    """The scenario's entry in the --baseline grid, if it ran there on as many machines (with its floor if asked)."""
    if args.baseline is None:
        return None
    entry = _entry(args.baseline, scenario)
    usable = (entry is not None and "error" not in entry and entry.get("machines", 1) == args.machines
              and (entry.get("floor_ratio") is not None or not args.floor))
    return entry if usable else None


def _entry(out: Path, scenario: Scenario) -> dict | None:
    """The entry in grid folder `out` of a scenario with these parameters, if there is one."""
    path = scenario_dir(out, scenario.index) / "entry.json"
    if not path.is_file():
        return None
    entry = json.loads(path.read_text())
    return entry if entry["parameters"] == json.loads(json.dumps(parameters(scenario))) else None


def simulate_scenario(scenario: Scenario, workload: Workload, spec: str, directory: Path, keep: bool,
                      trace: bool = False, machines: int = 1, floor: bool = False, shipped_set: tuple[str, ...] = (),
                      baseline: dict | None = None) -> dict:
    """Run one scenario in the simulator and write its entry.json (an error entry if it could not run)."""
    try:
        with quiet_forecast():
            outcome = run_scenario(scenario, workload, spec, directory / "runs" if keep else None,
                                   directory / "trace" if trace else None, machines, floor, shipped_set, baseline)
        entry = scenario_entry(scenario, outcome)
    except Exception as exc:  # one scenario's failure is a result of the grid, not its end
        entry = error_entry(scenario, f"{type(exc).__name__}: {exc}")
    (directory / "entry.json").write_text(json.dumps(entry, indent=1))
    return entry


def _progress(entry: dict) -> str:
    if "error" in entry:
        return f"scenario {entry['index']}: error: {entry['error']}"
    wall = sum(run["wall_s"] for run in entry["runs"].values())
    loaded = " loaded" if entry["loaded"] else ""
    delta = "-" if entry["continuity_delta"] is None else f"{entry['continuity_delta']:+.3f}"
    floor = "" if entry.get("floor_ratio") is None else f", floor {entry['floor_ratio']:.2f}"
    return (f"scenario {entry['index']}: ratio {entry['p90_ratio']:.2f}{loaded}, continuity {delta}{floor}, "
            f"{wall:.0f} s")


def write_summary(out: Path, summary: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, allow_nan=False))
    plot_ratios(summary["scenarios"], out / "ratios.png")
    print(f"written: {out / 'summary.json'}, {out / 'ratios.png'}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
