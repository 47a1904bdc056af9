"""Section `claim`: FCFS with LRU offload (preset `fcfs-lru`, vLLM-Omni with offload) against LiveServe's shipped
policies (preset `liveserve`) at equal load, with the replay bench as it is (a fresh server on 127.0.0.1 per run).

First the unloaded P90 audio TTFP (one user in flight), then FCFS with more users in flight, step by step, until
its P90 is at least `slowdown` times that (or the steps or the time run out), then the shipped preset at that same
load, right after: P90 TTFP, continuity, waste, for both, and the ratio. Each run's result is written to
OUT/claim/*.json, the replays' progress to OUT/claim/replay.log.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from lab.device_check.deadline import Deadline
from lab.device_check.sections import Skipped
from lab.replay.options import ReplayOptions
from lab.replay.run import run_replay
from lab.result_json import write_json
from liveserve.config.document import Override

STAGES = ("encoder", "thinker", "talker", "vocoder")


def on_gpu_overrides(dtype: str) -> tuple[str, ...]:
    """tiny-omni-cpu's stages on GPU 0 of a one-H200 node, in `dtype`, each in its own process with an equal share
    of the GPU's memory."""
    keys = ("devices=[[0]]", f"dtype={dtype}", f"memory_fraction={1 / len(STAGES):g}")
    return ("runtime.gpus=1x141GB", "runtime.placement=processes",
            *(f"stages.{stage}.{key}" for stage in STAGES for key in keys))


@dataclass(frozen=True)
class ClaimPlan:
    """`overrides` put the lab's config (tiny-omni-cpu) where it runs (a dry run: on threads, a faster start). The
    workload: random prompts of about `input_len` tokens and replies of about `output_len` (+-50 %), a session of one
    request each, a user's slot held until its reply was heard (`hold_until_heard` False: freed at its last audio),
    barge-in with probability `barge_in_prob`; `requests_per_user` requests per user in flight (`unloaded_requests`
    at one). FCFS tries `users` in order; a step starts only if it and the shipped run after it fit in the time left
    (each estimated as the last run took, times `growth`; at first `first_run_s`)."""

    overrides: tuple[str, ...]
    users: tuple[int, ...]
    requests_per_user: int
    unloaded_requests: int
    input_len: int
    output_len: int
    barge_in_prob: float
    first_run_s: float
    hold_until_heard: bool = True
    slowdown: float = 2.0
    growth: float = 2.0
    request_timeout_s: float = 60.0
    seed: int = 7
    baseline: str = "fcfs-lru"
    shipped: str = "liveserve"


ON_GPU = ClaimPlan(on_gpu_overrides("float32"), (8, 24, 72, 216), 2, 4, 32, 12, 0.5, 45.0)
DRY_RUN = ClaimPlan(("runtime.placement=threads",), (2,), 2, 4, 16, 4, 0.0, 10.0, hold_until_heard=False,
                    request_timeout_s=30.0)


def run_claim(plan: ClaimPlan, deadline: Deadline, out: Path) -> dict:
    replays = Replays(plan, out / "claim")
    unloaded = replays.run(plan.baseline, 1, plan.unloaded_requests)
    target_ms = plan.slowdown * unloaded["p90_ttfp_ms"]
    ramp, skipped, estimate = [], [], plan.first_run_s
    for users in plan.users:
        if not deadline.allows(2 * estimate):
            skipped.append(deadline.reason(f"{users} users ({plan.baseline}, then {plan.shipped})", 2 * estimate))
            break
        ramp.append(replays.run(plan.baseline, users, users * plan.requests_per_user))
        estimate = plan.growth * ramp[-1]["seconds"]
        if ramp[-1]["p90_ttfp_ms"] >= target_ms:
            break
    if not ramp:
        raise Skipped(f"no loaded run: {skipped[0]}")
    loaded = ramp[-1]
    shipped = replays.run(plan.shipped, loaded["users"], loaded["requests"])
    return {"config": "tiny-omni-cpu", "overrides": list(plan.overrides), "workload": replays.workload,
            "unloaded": unloaded, "ramp": ramp, "skipped": skipped, "target_p90_ttfp_ms": round(target_ms, 1),
            "reached_slowdown": loaded["p90_ttfp_ms"] >= target_ms, "baseline": loaded, "shipped": shipped,
            "p90_ttfp_ratio": round(shipped["p90_ttfp_ms"] / loaded["p90_ttfp_ms"], 3)}


class Replays:
    """Runs replays of the plan's workload, each result written to `folder` as PRESET-USERS.json."""

    def __init__(self, plan: ClaimPlan, folder: Path) -> None:
        self.plan, self.folder = plan, folder
        held = "held until heard" if plan.hold_until_heard else "freed at the last audio"
        self.workload = (f"random: {plan.input_len} tokens in, {plan.output_len} out (+-50 %), one request a session, "
                         f"{held}, barge-in {plan.barge_in_prob}")

    def run(self, preset: str, users: int, requests: int) -> dict:
        plan = self.plan
        options = ReplayOptions(
            dataset="random", num_requests=requests, seed=plan.seed, random_input_len=plan.input_len,
            random_output_len=plan.output_len, random_range_ratio=0.5, max_concurrency=users,
            hold_until_heard=plan.hold_until_heard, barge_in_prob=plan.barge_in_prob, policy=preset,
            overrides=tuple(map(Override.parse, plan.overrides)), request_timeout_s=plan.request_timeout_s)
        self.folder.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with (self.folder / "replay.log").open("a") as log:
            print(f"== {preset}, {users} users, {requests} requests", file=log, flush=True)
            result = run_replay(options, log=log)
        write_json(self.folder / f"{preset}-{users}.json", result)
        return figures(result, preset, users, requests, time.monotonic() - started)


def figures(result: dict, preset: str, users: int, requests: int, seconds: float) -> dict:
    """One replay's headline figures; RuntimeError if it has no audio TTFP (nothing was served)."""
    ttfp = result["audio_ttfp_ms"]
    if ttfp["p90"] is None:
        raise RuntimeError(f"{preset} at {users} users served nothing ({result['num_failed']} requests failed)")
    return {"preset": preset, "users": users, "requests": requests, "p50_ttfp_ms": round(ttfp["p50"], 1),
            "p90_ttfp_ms": round(ttfp["p90"], 1), "continuity_ok_rate": result["continuity_ok_rate"],
            "wasted_token_ratio": result["wasted_token_ratio"], "num_failed": result["num_failed"],
            "num_cancelled": result["num_cancelled"], "seconds": round(seconds, 1)}
