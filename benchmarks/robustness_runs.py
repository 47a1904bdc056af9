"""One robustness scenario's runs: FCFS+LRU and the shipped policies on the same plan, and FCFS unloaded.

Every run is a `liveserve bench replay` of the scenario's sample through lab.replay's API: in the simulator
(`simulate`: a sim spec, virtual time) or, with `simulate` None, for real on a fresh server on 127.0.0.1.
The KV pools: where the scenario's share is 1 (everything fits), pools holding every session in flight
(`fits_blocks`); otherwise FCFS+LRU first runs with those pools to measure the working set (the peak thinker
and talker blocks), then both policies run with the share of it (never below the largest session's context).
Simulated, each policy runs on `machines` draws of the spec's step noise (machine seeds 0, 1, ...: FCFS+LRU
and the shipped policies meet the same machines), and with `floor` FCFS+LRU runs again on as many other
machines: how far the P90 of one policy moves from one machine to another, the yardstick for the ratios.
`shipped_set` (`KEY.PATH=VALUE` texts) changes the shipped policies' runs only: a variant of them against the same
FCFS+LRU, whose runs may come from an earlier grid's entry (`baseline`) instead of running again.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from robustness_scenarios import Scenario
from robustness_workloads import Workload, fits_blocks, largest_session_blocks

from lab.replay.options import ReplayOptions
from lab.replay.run import run_replay
from lab.sim.replay import run_simulated_replay
from liveserve.config.document import Override

ROOT = Path(__file__).resolve().parents[1]
SIM_SPEC = str(ROOT / "configs" / "sim" / "tiny-omni-cpu.yaml")
FCFS, SHIPPED, UNLOADED, FITS = "fcfs-lru", "liveserve", "unloaded", "fcfs-lru-fits"
UNLOADED_REQUESTS = 16  # the unloaded run's sample: the first requests (or sessions of up to that many turns)
FORECAST_LOGGER = "liveserve.admission.forecast"  # warns once per pool and run: hundreds in a grid


@contextmanager
def quiet_forecast():
    """Silence the KV forecast's warnings for a block, and restore its logger's level after."""
    logger = logging.getLogger(FORECAST_LOGGER)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_scenario(scenario: Scenario, workload: Workload, simulate: str | None, keep: Path | None = None,
                 trace: Path | None = None, machines: int = 1, floor: bool = False,
                 shipped_set: tuple[str, ...] = (), baseline: dict | None = None) -> dict:
    """{"pools", "working_set" (None where everything fits), "machines", "set" (`shipped_set`), "runs": {name:
    figures and `wall_s`}} (see `run_figures`; `run_name` names each policy's run on each machine, the floor's
    FCFS+LRU runs are on machines `machines` to 2 x `machines` - 1); with `keep`, each run's whole result JSON is
    written there as NAME.json; with `trace`, each run's step traces (`runtime.trace_dir`) go to `trace`/NAME/.
    With `baseline` (an earlier outcome of this scenario on as many machines, with the floor's runs where `floor`
    asks for them), its pools and FCFS+LRU's runs are taken from it, and only the shipped policies run."""
    run = _runner(scenario, workload, simulate, keep, trace, shipped_set)
    if baseline is None:
        runs, working_set, pools = _fcfs_runs(scenario, workload, run, machines, floor)
    else:
        kept = {FITS, UNLOADED} | {run_name(FCFS, machine) for machine in range(machines * (2 if floor else 1))}
        runs = {name: figures for name, figures in baseline["runs"].items() if name in kept}
        working_set, pools = baseline["working_set"], baseline["pools"]
    for machine in range(machines):
        runs[run_name(SHIPPED, machine)] = run(run_name(SHIPPED, machine), SHIPPED, pools, machine)
    return {"pools": pools, "working_set": working_set, "machines": machines, "set": list(shipped_set), "runs": runs}


def _fcfs_runs(scenario: Scenario, workload: Workload, run, machines: int,
               floor: bool) -> tuple[dict, dict | None, dict[str, int]]:
    """FCFS+LRU's runs (sizing the pools, on every machine, the floor's, unloaded), the working set and pools."""
    fits = fits_blocks(workload, scenario.users, scenario.spoken)
    runs, working_set, pools = {}, None, fits
    if scenario.pool_share < 1.0:
        runs[FITS] = run(FITS, FCFS, fits)
        working_set = {stage: int(runs[FITS]["peak_blocks"][stage]) for stage in fits}
        largest = largest_session_blocks(workload, scenario.spoken)
        pools = {stage: max(largest[stage], math.ceil(scenario.pool_share * working_set[stage])) for stage in fits}
    for machine in range(machines * (2 if floor else 1)):
        runs[run_name(FCFS, machine)] = run(run_name(FCFS, machine), FCFS, pools, machine)
    runs[UNLOADED] = run(UNLOADED, FCFS, fits)
    return runs, working_set, pools


def run_name(policy: str, machine: int) -> str:
    """A policy's run on machine `machine` (seed 0: the policy's name alone)."""
    return policy if machine == 0 else f"{policy}@{machine}"


def _runner(scenario: Scenario, workload: Workload, simulate: str | None, keep: Path | None, trace: Path | None,
            shipped_set: tuple[str, ...] = ()):
    def run(name: str, policy: str, pools: dict[str, int], machine: int = 0) -> dict:
        if name == UNLOADED:
            options = unloaded_options(scenario, workload, policy, pools, simulate)
        else:
            options = replay_options(scenario, workload, policy, pools, simulate, shipped_set)
        if simulate is not None:
            options = replace(options, machine_seed=machine)
        if trace is not None:
            traced = Override(("runtime", "trace_dir"), str(trace / name))
            options = replace(options, overrides=(*options.overrides, traced))
        started = time.perf_counter()
        result = replay(options)
        wall_s = time.perf_counter() - started
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{name}.json").write_text(json.dumps(result))
        return {**run_figures(result), "wall_s": round(wall_s, 2)}
    return run


def replay_options(scenario: Scenario, workload: Workload, policy: str, pools: dict[str, int],
                   simulate: str | None, shipped_set: tuple[str, ...] = ()) -> ReplayOptions:
    """The scenario's replay under `policy` with thinker and talker pools of `pools` blocks (and, for the shipped
    policies, the `shipped_set` settings after them)."""
    pooled = tuple(Override(("stages", stage, "kv", "num_blocks"), blocks) for stage, blocks in pools.items())
    varied = tuple(Override.parse(text) for text in shipped_set) if policy == SHIPPED else ()
    return ReplayOptions(
        dataset=scenario.source, dataset_path=workload.path, num_requests=len(workload.sessions), seed=scenario.seed,
        request_rate=scenario.request_rate, burstiness=scenario.burstiness, max_concurrency=scenario.users,
        hold_until_heard=scenario.hold_until_heard, prompt_audio=scenario.spoken,
        barge_in_prob=scenario.barge_in_prob, policy=policy, simulate=simulate,
        overrides=(*pooled, *varied),
    )


def unloaded_options(scenario: Scenario, workload: Workload, policy: str, pools: dict[str, int],
                     simulate: str | None) -> ReplayOptions:
    """One user at a time over the first requests of the sample, no barge-in: what `loaded` compares with."""
    sessions = max(1, UNLOADED_REQUESTS // scenario.turns)
    options = replay_options(scenario, workload, policy, pools, simulate)
    return replace(options, num_requests=min(sessions, len(workload.sessions)), request_rate=math.inf,
                    max_concurrency=1, hold_until_heard=False, barge_in_prob=0.0)


def replay(options: ReplayOptions) -> dict[str, Any]:
    """The replay's result object, simulated or real; its progress lines are dropped."""
    with open(os.devnull, "w") as quiet:
        return (run_replay if options.simulate is None else run_simulated_replay)(options, log=quiet)


def run_figures(result: dict[str, Any]) -> dict[str, Any]:
    """What the grid keeps of a run: audio TTFP, continuity, outcomes, waste, KV figures and, simulated, the P99 of
    how long work waited for the server's loop (None for a real run)."""
    kv, ttfp = result.get("kv") or {}, result["audio_ttfp_ms"]
    server_loop = (result.get("simulated") or {}).get("server_loop")
    return {
        "ttfp_p50_ms": ttfp["p50"], "ttfp_p90_ms": ttfp["p90"], "ttfp_p99_ms": ttfp["p99"],
        "continuity": result["continuity_ok_rate"], "requests": result["num_requests"],
        "completed": result["num_completed"], "cancelled": result["num_cancelled"], "failed": result["num_failed"],
        "waste": result["wasted_token_ratio"], "preemptions": kv.get("preemptions"),
        "reload_on_path_ms": kv.get("reload_ms_on_path"), "peak_blocks": kv.get("peak_device_blocks_by_stage"),
        "loop_wait_p99_ms": server_loop["wait_ms"]["p99"] if server_loop else None,
    }

