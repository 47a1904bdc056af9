"""Cost of one scheduling round under the urgency policy, with 256 ready requests.

A thinker stage (KV pool of 16-token blocks, default budgets: 512 tokens, 64
sequences) holds 256 decoding requests, all ready every round, with playback
telemetry of every kind: 32 at risk (U0), 48 waiting for first audio (U1), 96
buffered under P_yield (U2), 48 buffered past P_yield (yielded, as U1 listeners
wait), 24 past P_max (held), 8 without telemetry (fallbacks). A first
round with room for everyone prefills all of them, so every request holds KV (the
utility looks up each one's blocks); then 64 of them decode per round. The clock
stands still, so the mix stays put. Measured per round, over `--rounds` rounds
after `--warmup` untimed ones: `policy.order` alone on the ready list, and a whole
`Scheduler.schedule()` (ready scan, order, admission with KV reservation); the
fake runner and `update_from_output` run between rounds, untimed. fcfs is measured
the same way for reference. The target is a round of at most 0.2 ms.

    .venv/bin/python benchmarks/urgency_round.py [--rounds 2000] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from dataclasses import replace
from pathlib import Path

from kvtier import KVCacheManager, KVPoolConfig
from stages.config import SamplingParams, SchedulerConfig
from stages.interaction import InteractionView, PlaybackState
from stages.plan import RunnerOutput, SchedulerPlan
from stages.policies import make_policy
from stages.requests import ThinkerRequest, TurnInput
from stages.scheduler import Scheduler

NUM_REQUESTS = 256
MIX = {"u0": 32, "u1": 48, "u2": 96, "yielded": 48, "held": 24, "fallback": 8}
PROMPT_TOKENS = 32


class DictView(InteractionView):
    """Telemetry from a dict, as cheap as the orchestrator's board lookup."""

    def __init__(self, states: dict[str, PlaybackState]) -> None:
        self.states = states

    def playback(self, request_id: str) -> PlaybackState | None:
        return self.states.get(request_id)


def telemetry(rng: random.Random) -> dict[str, PlaybackState]:
    """One state per request id (none for fallbacks), drawn per class; the clock stays at 0."""
    draw = {
        "u0": lambda: PlaybackState(True, rng.uniform(0.0, 0.3), rng.uniform(0.0, 100.0)),
        "u1": lambda: PlaybackState(False, 0.0, rng.uniform(0.0, 200.0)),
        "u2": lambda: PlaybackState(True, rng.uniform(0.45, 0.75), rng.uniform(0.0, 200.0)),
        "yielded": lambda: PlaybackState(True, rng.uniform(1.0, 1.5), rng.uniform(0.0, 400.0)),
        "held": lambda: PlaybackState(True, rng.uniform(2.0, 8.0), 0.0),
    }
    kinds = [kind for kind, count in MIX.items() for _ in range(count)]
    rng.shuffle(kinds)
    return {f"r{i}": draw[kind]() for i, kind in enumerate(kinds) if kind != "fallback"}


def decode_runner(plan: SchedulerPlan) -> RunnerOutput:
    """Samples token 7 wherever a chunk ends at the newest position: requests decode forever."""
    return RunnerOutput({c.request.request_id: (7, None) for c in plan.chunks if c.request.wants_sample(c.end)})


def build(policy: str, rounds: int, seed: int) -> Scheduler:
    rng = random.Random(seed)
    blocks = NUM_REQUESTS * (PROMPT_TOKENS // 16 + 1) + 64 * (rounds // 16 + 2)  # prompts + 64 decoding per round
    kv = KVCacheManager(KVPoolConfig(num_blocks=blocks, block_size=16, num_layers=1, num_kv_heads=1, head_dim=2))
    scheduler = Scheduler(SchedulerConfig(policy=policy), kv, clock=lambda: 0.0, view=DictView(telemetry(rng)))
    sampling = SamplingParams(temperature=0.0, max_tokens=10**9, ignore_eos=True)
    for i in range(NUM_REQUESTS):
        request = ThinkerRequest(f"r{i}", rng.uniform(0.0, 10.0), stop_ids=frozenset(), max_position=10**9)
        request.append(TurnInput([rng.randrange(100) for _ in range(PROMPT_TOKENS)], sampling=sampling))
        scheduler.add(request)
    return scheduler


def admit_all(scheduler: Scheduler) -> None:
    """One round with budgets for everyone and no telemetry: every request is prefilled and holds KV."""
    planner = scheduler.planner
    config, view = planner.config, scheduler.policy.view
    planner.config = replace(config, max_num_seqs=NUM_REQUESTS, max_num_batched_tokens=NUM_REQUESTS * PROMPT_TOKENS)
    scheduler.policy.view = None
    run_round(scheduler)
    planner.config, scheduler.policy.view = config, view


def run_round(scheduler: Scheduler) -> int:
    """One untimed step after a timed schedule(): run and commit, keeping every request ready."""
    started = time.perf_counter_ns()
    plan = scheduler.schedule()
    elapsed = time.perf_counter_ns() - started
    scheduler.update_from_output(plan, decode_runner(plan))
    return elapsed


def summary(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    return {
        "min_ms": ordered[0] / 1e6,
        "mean_ms": statistics.fmean(ordered) / 1e6,
        "p50_ms": ordered[len(ordered) // 2] / 1e6,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] / 1e6,
        "max_ms": ordered[-1] / 1e6,
    }


def measure(policy: str, rounds: int, warmup: int, seed: int) -> dict:
    scheduler = build(policy, rounds + warmup, seed)
    admit_all(scheduler)
    for _ in range(warmup):
        run_round(scheduler)
    ready = [r for r in scheduler.requests.values() if r.num_pending > 0]
    assert len(ready) == NUM_REQUESTS, f"{len(ready)} ready after warm-up"
    alone = make_policy(scheduler.config, scheduler.policy.view, scheduler.kv)  # a twin with its own counters
    order_ns, round_ns = [], []
    for _ in range(rounds):
        started = time.perf_counter_ns()
        alone.order(ready, 0.0)
        order_ns.append(time.perf_counter_ns() - started)
        round_ns.append(run_round(scheduler))
    scheduler.check_integrity()
    return {"order": summary(order_ns), "schedule": summary(round_ns), "counters": scheduler.policy.counters}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = {policy: measure(policy, args.rounds, args.warmup, args.seed) for policy in ("urgency", "fcfs")}
    print(f"{NUM_REQUESTS} ready requests, {args.rounds} rounds (mix {MIX}); ms per call")
    columns = ("min_ms", "mean_ms", "p50_ms", "p99_ms", "max_ms")
    print(f"{'':22}" + "".join(f"{c[:-3]:>8}" for c in columns))
    for policy, result in results.items():
        for what, label in (("order", "policy.order"), ("schedule", "schedule()")):
            print(f"{policy + ' ' + label:22}" + "".join(f"{result[what][c]:8.3f}" for c in columns))
    print(f"urgency counters of the scheduled rounds (warm-up included): {results['urgency']['counters']}")
    if args.json is not None:
        meta = {"requests": NUM_REQUESTS, "mix": MIX, "rounds": args.rounds, "warmup": args.warmup,
                "python": platform.python_version(), "machine": platform.machine()}
        args.json.write_text(json.dumps({"setup": meta, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
