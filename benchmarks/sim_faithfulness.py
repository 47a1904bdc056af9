"""Issue 29, item 4: does the simulator, fitted to this CPU, reproduce real tiny-omni runs here?

Simulates (configs/sim/tiny-omni-cpu.yaml, fitted by benchmarks/sim_fit_cpu.py) the point the real runs
measured, with the same options, and prints simulated against measured with the error of each figure:
- the voice-user point: 128 requests, 48 users who each hold their slot until the reply is heard,
  barge-in 0.5, replies of 60-180 tokens, benchmarks/configs/many_sessions.yaml; fcfs-lru and liveserve:
  P50 / P90 audio TTFP and continuity;
- one duplex ramp: 480-ms frames, window 96 + 4 sinks, 1,024 thinker blocks, sessions offered at 1.2/s
  that hang up after 90 s, AIMD at its defaults, 240 s: settled cap and live count, settled p99 and the
  p50 of per-frame latency.

The real runs (one each, back to back; result JSONs given as arguments), their step traces fitted
(benchmarks/sim_fit_cpu.py) into the spec's knobs before the simulated runs:

    liveserve bench replay --dataset random --num-requests 128 --random-input-len 64 --random-output-len 120 \
        --random-range-ratio 0.5 --seed 0 --request-rate 8 --hold-until-heard --max-concurrency 48 \
        --barge-in-prob 0.5 --config benchmarks/configs/many_sessions.yaml --policy POLICY \
        --set runtime.trace_dir=TRACES-POLICY --result-json real-POLICY.json
    liveserve bench duplex --frame-ms 480 --chunk-ms 160 --ramp 1.2 --session-s 90 --duration-s 240 \
        --admission aimd --kv-blocks 1024 --window 96 --sinks 4 --set runtime.trace_dir=TRACES-RAMP \
        --result-json real-ramp.json
    .venv/bin/python benchmarks/sim_fit_cpu.py TRACES-fcfs-lru TRACES-liveserve --windowed TRACES-RAMP --window 100
    .venv/bin/python benchmarks/sim_faithfulness.py real-fcfs-lru.json real-liveserve.json real-ramp.json --out F
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from lab.duplex.options import DuplexOptions
from lab.replay.options import ReplayOptions
from lab.sim.duplex import run_simulated_duplex
from lab.sim.replay import run_simulated_replay

ROOT = Path(__file__).resolve().parents[1]
SPEC = str(ROOT / "configs" / "sim" / "tiny-omni-cpu.yaml")
VOICE_USERS = {"dataset": "random", "num_requests": 128, "random_input_len": 64, "random_output_len": 120,
               "random_range_ratio": 0.5, "seed": 0, "request_rate": 8.0, "hold_until_heard": True,
               "max_concurrency": 48, "barge_in_prob": 0.5, "config": ROOT / "benchmarks/configs/many_sessions.yaml"}
RAMP = {"frame_ms": 480, "chunk_ms": 160, "ramp": 1.2, "session_s": 90.0, "duration_s": 240.0, "admission": "aimd",
        "kv_blocks": 1024, "window": 96, "sinks": 4}


def replay_figures(result: dict) -> dict:
    return {"ttfp_p50_ms": result["audio_ttfp_ms"]["p50"], "ttfp_p90_ms": result["audio_ttfp_ms"]["p90"],
            "continuity": result["continuity_ok_rate"], "completed": result["num_completed"],
            "barged_in": result["num_cancelled"]}


def ramp_figures(result: dict) -> dict:
    ramp = result["ramp"]
    return {"settled_cap": ramp["settled_cap"], "settled_live": ramp["settled_live"],
            "settled_p99_ms": (ramp.get("settled_latency_ms") or {}).get("p99"),
            "frame_p50_ms": result["frame_latency_overall_ms"]["p50"], "rejected": ramp["rejected"]}


def compare(name: str, real: dict, simulated: dict) -> dict:
    rows = {}
    for key, value in real.items():
        sim = simulated[key]
        error = None if not value or sim is None else sim / value - 1
        rows[key] = {"real": value, "simulated": sim, "error": error}
        shown = "-" if error is None else f"{error:+.0%}"
        print(f"{name:>10} {key:>15}: real {value:>8.3f}  simulated {sim:>8.3f}  {shown}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("real_fcfs", type=Path)
    parser.add_argument("real_liveserve", type=Path)
    parser.add_argument("real_ramp", type=Path)
    parser.add_argument("--spec", default=SPEC)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    table, wall = {}, {}
    with open(os.devnull, "w") as quiet:
        for policy, path in (("fcfs-lru", args.real_fcfs), ("liveserve", args.real_liveserve)):
            sim = run_simulated_replay(ReplayOptions(simulate=args.spec, policy=policy, **VOICE_USERS), log=quiet)
            table[policy] = compare(policy, replay_figures(json.loads(path.read_text())), replay_figures(sim))
            wall[policy] = sim["simulated"]["wall_s"]
        sim = run_simulated_duplex(DuplexOptions(simulate=args.spec, **RAMP), log=quiet)
        table["ramp"] = compare("ramp", ramp_figures(json.loads(args.real_ramp.read_text())), ramp_figures(sim))
        wall["ramp"] = sim["simulated"]["wall_s"]
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"simulated": True, "spec": args.spec, "calibration": sim["simulated"]["calibration"],
                                        "figures": table, "wall_s": wall}, indent=2))


if __name__ == "__main__":
    main()
