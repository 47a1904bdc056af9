"""Issue 29, item 5: LiveServe's policies projected to H200s by the simulator. Every figure is a SIMULATION
resting on the calibration its spec states (configs/sim/qwen3-omni-{1,8}xh200.yaml: the vLLM-Omni fit of
qwen3-omni-3xh100-vllm-omni carried to the H200 unchanged).

Parts (`--parts`, all by default; each prints its table and writes DIR/<part>.json):
- users: voice users at equal load (each holds its slot until its reply is heard, barge-in 0.5, 4 requests a
  user, prompts 1,000 and replies 50 tokens +-50 %, requests arriving at users/8 a second so that the first
  questions come over ~8 s, not all at once) on 1 and 8 H200s, fcfs-lru against liveserve, at each
  concurrency; then the most users per GPU with continuity >= 95 % on the grid.
- cliff: 128 unbounded duplex streams on one H200 until the thinker's pool fills, against the arithmetic
  (pool tokens / (streams x tokens a stream adds per second)).
- aimd: windowed duplex streams on one H200: a fixed-N sweep for N* (the largest N up to which every N keeps
  p99 frame latency under half the frame and no stream stalls), then an AIMD ramp started 1/8 below it.
- reload: multi-turn voice sessions on one H200 whose contexts outgrow a thinker pool cut to about half of
  them: KV reloaded over the host link on and off the critical path, fcfs-lru against liveserve.
About 20 minutes of wall time on this project's 2-core VM, most of it the aimd part.

    .venv/bin/python benchmarks/sim_projections.py --out benchmarks/results/sim_projections [--parts users,cliff]

Four experiments in one file: each part is one function, sharing only the runners at the top.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

from lab.duplex.options import DuplexOptions
from lab.replay.options import ReplayOptions
from lab.sim.duplex import run_simulated_duplex
from lab.sim.replay import run_simulated_replay
from lab.sim.server import SimulatedConfig
from lab.sim.spec import load_spec
from liveserve.config.document import Override

SPECS = Path(__file__).resolve().parents[1] / "configs" / "sim"
ONE, EIGHT = SPECS / "qwen3-omni-1xh200.yaml", SPECS / "qwen3-omni-8xh200.yaml"
POLICIES = ("fcfs-lru", "liveserve")
CONTINUITY_OK = 0.95


def quiet_replay(**fields) -> dict:
    with open(os.devnull, "w") as log:
        return run_simulated_replay(ReplayOptions(**fields), log=log)


def quiet_duplex(**fields) -> dict:
    with open(os.devnull, "w") as log:
        return run_simulated_duplex(DuplexOptions(**fields), log=log)


def users(grid: dict[Path, list[int]]) -> dict:
    rows = []
    for spec, concurrencies in grid.items():
        gpus = len(load_spec(str(spec)).devices)
        for users_ in concurrencies:
            for policy in POLICIES:
                r = quiet_replay(simulate=str(spec), policy=policy, num_requests=4 * users_, max_concurrency=users_,
                                 request_rate=users_ / 8, hold_until_heard=True, barge_in_prob=0.5, random_input_len=1000,
                                 random_output_len=50, random_range_ratio=0.5)
                rows.append({"spec": spec.stem, "gpus": gpus, "users": users_, "policy": policy,
                             "ttfp_p90_ms": r["audio_ttfp_ms"]["p90"], "ttfp_p50_ms": r["audio_ttfp_ms"]["p50"],
                             "continuity": r["continuity_ok_rate"], "rtf_p50": r["audio_rtf"]["p50"],
                             "waste": r["wasted_token_ratio"], "completed": r["num_completed"],
                             "cancelled": r["num_cancelled"], "wall_s": r["simulated"]["wall_s"]})
                print(_user_line(rows[-1]), flush=True)
    return {"rows": rows, "users_per_gpu": _users_per_gpu(rows)}


def _user_line(row: dict) -> str:
    return (f"{row['spec']:>18} {row['users']:>4} users {row['policy']:>9}: P50 / P90 TTFP {row['ttfp_p50_ms']:.0f} / {row['ttfp_p90_ms']:.0f} ms, "
            f"continuity {row['continuity']:.2f}, RTF p50 {row['rtf_p50']:.2f}, waste {row['waste']:.3f}, "
            f"completed / barged in {row['completed']} / {row['cancelled']}  [{row['wall_s']:.0f} s wall]")


def _users_per_gpu(rows: list[dict]) -> list[dict]:
    """Per spec and policy: the most users on the grid whose continuity is >= CONTINUITY_OK, per GPU."""
    best = {}
    for row in rows:
        key = (row["spec"], row["policy"])
        best.setdefault(key, {"spec": row["spec"], "policy": row["policy"], "users": 0, "users_per_gpu": 0.0,
                              "tried_up_to": 0})
        best[key]["tried_up_to"] = max(best[key]["tried_up_to"], row["users"])
        if row["continuity"] is not None and row["continuity"] >= CONTINUITY_OK and row["users"] > best[key]["users"]:
            best[key].update(users=row["users"], users_per_gpu=row["users"] / row["gpus"])
    for entry in best.values():
        print(f"{entry['spec']:>18} {entry['policy']:>9}: {entry['users']} users ({entry['users_per_gpu']:g} a GPU) "
              f"with continuity >= {CONTINUITY_OK} (grid up to {entry['tried_up_to']})")
    return list(best.values())


def plot_users(rows: list[dict], path: Path) -> None:
    """P90 TTFP and continuity against users, a line per spec and policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (ttfp, continuity) = plt.subplots(1, 2, figsize=(11, 4))
    for spec in sorted({row["spec"] for row in rows}):
        for policy, style in zip(POLICIES, ("--", "-")):
            line = [row for row in rows if row["spec"] == spec and row["policy"] == policy]
            label = f"{spec.removeprefix('qwen3-omni-')} {policy}"
            ttfp.plot([r["users"] for r in line], [r["ttfp_p90_ms"] for r in line], style, marker="o", label=label)
            continuity.plot([r["users"] for r in line], [r["continuity"] for r in line], style, marker="o", label=label)
    for axes, title in ((ttfp, "P90 audio TTFP (ms)"), (continuity, "continuity ok (<= 100 ms)")):
        axes.set_xscale("log", base=2)
        axes.set_xlabel("voice users")
        axes.set_title(title)
        axes.grid(alpha=0.3)
    continuity.axhline(CONTINUITY_OK, color="grey", lw=0.8)
    ttfp.legend(fontsize=8)
    figure.suptitle("SIMULATED (qwen3-omni-1xh200 / -8xh200; the vLLM-Omni H100 fit carried over)", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def stream_growth(spec: Path, frame_ms: int) -> tuple[int, float]:
    """The thinker pool's tokens on `spec` and the tokens one duplex stream adds a second (encoder frames +
    text tokens each frame)."""
    sim = SimulatedConfig.load(None, _overrides(f"duplex.frame_ms={frame_ms}"), load_spec(str(spec)))
    kv, duplex = sim.config.pipeline.thinker.kv, sim.config.duplex
    return kv.num_blocks * kv.block_size, (duplex.encoder_frames + duplex.tokens_per_frame) * 1000 / frame_ms


def cliff(streams: int = 128, frame_ms: int = 480) -> dict:
    """480-ms frames: a stream adds 14.6 tokens a second (6 encoder frames + 1 text token a frame), near the
    issue's ~16, and the run costs a sixth of the wall time of 80-ms frames."""
    pool, per_s = stream_growth(ONE, frame_ms)
    arithmetic_s = pool / (streams * per_s)
    r = quiet_duplex(simulate=str(ONE), sessions=streams, frame_ms=frame_ms, chunk_ms=160, poll_interval_s=2.0,
                     duration_s=round(arithmetic_s * 1.25))
    row = {"streams": streams, "frame_ms": frame_ms, "pool_tokens": pool, "tokens_per_s_per_stream": per_s,
           "arithmetic_s": arithmetic_s, "issue_arithmetic_s": 670_000 / (128 * 16),
           "t_sat_measured_s": r["t_sat_measured_s"], "t_sat_predicted_s": r["t_sat_predicted_s"],
           "peak_occupancy": r["peak_occupancy"], "stalled_sessions": r["stalled_sessions"],
           "latency_by_10s_p99_ms": [b["p99"] for b in r["frame_latency_ms"]],
           "wall_s": r["simulated"]["wall_s"]}
    print(f"cliff: {streams} unbounded streams, pool {pool:,} tokens, {per_s:g} tokens/s a stream: arithmetic "
          f"{arithmetic_s:.0f} s (the issue's: {row['issue_arithmetic_s']:.0f} s at 670k tokens, 16/s); simulated: "
          f"full at {row['t_sat_measured_s']} s, forecast {row['t_sat_predicted_s']} s, {row['stalled_sessions']} "
          f"streams stalled  [{row['wall_s']:.0f} s wall]", flush=True)
    return row


def aimd(sweep: list[int], window: int, sinks: int, frame_ms: int, duration_s: float, ramp_s: float) -> dict:
    """N* of windowed streams on one H200, then an AIMD ramp against it. AIMD adds one session per latency
    window (admission.latency_window_s, 2 s) from its initial cap (4): 2 x (N* - 4) s at best to reach N*, a
    ramp whose wall time here grows with the square of its length. So the ramp starts its cap 1/8 below
    N* (`admission.initial_cap`), offers 8 sessions a second that never leave, with AIMD's target at the
    sweep's line (0.5): does it climb to N* and hold within 10 % of it?"""
    common = {"simulate": str(ONE), "frame_ms": frame_ms, "chunk_ms": frame_ms, "window": window, "sinks": sinks,
              "poll_interval_s": 1.0}
    points = []
    for streams in sweep:
        r = quiet_duplex(**common, sessions=streams, duration_s=duration_s)
        p99 = r["frame_latency_overall_ms"]["p99"]
        points.append({"streams": streams, "p99_ms": p99, "p50_ms": r["frame_latency_overall_ms"]["p50"],
                       "stalled": r["stalled_sessions"],
                       "schedulable": p99 is not None and p99 <= frame_ms / 2 and not r["stalled_sessions"],
                       "wall_s": r["simulated"]["wall_s"]})
        print(f"aimd sweep: N={streams}: p50 / p99 {points[-1]['p50_ms']} / {p99} ms, stalled {r['stalled_sessions']}, "
              f"schedulable {points[-1]['schedulable']}  [{points[-1]['wall_s']:.0f} s wall]", flush=True)
    n_star = 0
    for point in points:
        if not point["schedulable"]:
            break
        n_star = point["streams"]
    start_cap = n_star - n_star // 8
    r = quiet_duplex(**common, ramp=8.0, duration_s=ramp_s, admission="aimd",
                     admission_set=(("target", 0.5), ("initial_cap", start_cap)), sessions=2 * n_star)
    ramp = r["ramp"]
    row = {"window": window, "sinks": sinks, "frame_ms": frame_ms, "sweep": points, "n_star": n_star,
           "aimd_climb_from_4_s": 2 * (n_star - 4), "ramp_initial_cap": start_cap, "ramp_s": ramp_s,
           "settled_cap": ramp["settled_cap"], "settled_live": ramp["settled_live"],
           "settled_p99_ms": (ramp.get("settled_latency_ms") or {}).get("p99"),
           "stalled_sessions": r["stalled_sessions"], "wall_s": r["simulated"]["wall_s"]}
    print(f"aimd: N* = {n_star} (grid {sweep}); ramp from cap {start_cap} for {ramp_s:g} s: settled cap "
          f"{row['settled_cap']} / live {row['settled_live']}, settled p99 {row['settled_p99_ms']} ms  "
          f"[{row['wall_s']:.0f} s wall]", flush=True)
    return row


def write_trace(path: Path, sessions: int, turns: int, seed: int = 0) -> None:
    """`sessions` voice users of `turns` turns (prompts 800-1,200 tokens, replies 40-60, 2-6 s between a reply
    and the next question), starting 0.25 s apart: the `interactive` format."""
    rng = random.Random(seed)
    lines = []
    for session in range(sessions):
        t = session * 0.25
        for turn in range(turns):
            reply = rng.randint(40, 60)
            lines.append(json.dumps({"session_id": f"s{session:03d}", "timestamp": round(t, 3), "turn": turn,
                                     "request_tokens": rng.randint(800, 1200), "response_tokens": reply}))
            t += reply * 0.24 + rng.uniform(2, 6)
    path.write_text("\n".join(lines) + "\n")


def reload(out: Path, sessions: int, turns: int, pool_blocks: int) -> dict:
    """A thinker pool of `pool_blocks` (16 tokens each) that the sessions' contexts (~5,500 tokens each
    after 5 turns) outgrow; few enough sessions that the talker keeps up (see users)."""
    trace = out / "reload_trace.jsonl"
    write_trace(trace, sessions, turns)
    rows = []
    for policy in POLICIES:
        r = quiet_replay(simulate=str(ONE), policy=policy, dataset="interactive", dataset_path=trace,
                         num_requests=sessions, trace_arrivals=True,
                         overrides=_overrides(f"stages.thinker.kv.num_blocks={pool_blocks}"))
        kv = r["kv"]
        rows.append({"policy": policy, "ttfp_p90_ms": r["audio_ttfp_ms"]["p90"], "ttfp_p50_ms": r["audio_ttfp_ms"]["p50"],
                     "continuity": r["continuity_ok_rate"], "reload_ms_on_path": kv["reload_ms_on_path"],
                     "reload_ms_off_path": kv["reload_ms_off_path"], "evictions": kv["evictions"],
                     "preemptions": kv["preemptions"], "preload_hits": kv["preload_hits"],
                     "completed": r["num_completed"], "failed": r["num_failed"], "wall_s": r["simulated"]["wall_s"]})
        row = rows[-1]
        print(f"reload {policy:>9}: P90 TTFP {row['ttfp_p90_ms']:.0f} ms, reload on / off the path "
              f"{row['reload_ms_on_path']} / {row['reload_ms_off_path']} ms, evictions {row['evictions']}, "
              f"preemptions {row['preemptions']}, continuity {row['continuity']}  [{row['wall_s']:.0f} s wall]",
              flush=True)
    return {"sessions": sessions, "turns": turns, "thinker_pool_blocks": pool_blocks, "rows": rows}


def _overrides(*texts: str) -> tuple[Override, ...]:
    return tuple(Override.parse(text) for text in texts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", default="users,cliff,aimd,reload")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    calibration = load_spec(str(ONE)).calibration
    runs = {"users": lambda: users({ONE: [8, 16, 24, 32, 48, 64, 128], EIGHT: [64, 128, 256]}),
            "cliff": cliff,
            "aimd": lambda: aimd([256, 320, 384, 448], window=1040, sinks=16, frame_ms=80, duration_s=60,
                                 ramp_s=180),
            "reload": lambda: reload(args.out, sessions=32, turns=5, pool_blocks=5500)}
    for part in args.parts.split(","):
        result = {"simulated": True, "calibration": calibration, **runs[part]()}
        (args.out / f"{part}.json").write_text(json.dumps(result, indent=2))
        if part == "users":
            plot_users(result["rows"], args.out / "users.png")


if __name__ == "__main__":
    main()
