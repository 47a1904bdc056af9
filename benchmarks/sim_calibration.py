"""Issue 29's calibration: the simulator's FCFS preset against vLLM-Omni's published Qwen3-Omni figures.

Replays vLLM-Omni's CI perf workload (random prompts of 2,500 tokens, replies of 900, ignore_eos; 128
prompts at each concurrency) with `liveserve bench replay --simulate` on the calibration specs
(configs/sim/qwen3-omni-3xh100-vllm-omni.yaml at concurrency 8-32, qwen3-omni-2xh100-vllm-omni.yaml at
1) under the fcfs-nooffload preset, and prints simulated against published mean audio TTFP and RTF, the
error of each point, and the thinker's roofline decode step against the published mean TPOT. Writes the
table to --out as JSON. Everything it prints is a simulation resting on those specs' fitted knobs.

    .venv/bin/python benchmarks/sim_calibration.py --out benchmarks/results/sim_calibration.json

Published (vllm-project/vllm-omni tests/dfx/perf/tests/test_qwen3_omni_multi_replicas.json, H100
baselines, 7-day averages; the concurrency-1 point as quoted in issue 29). `--range-ratio` draws prompt
and reply lengths within +-that share of 2,500 / 900 (means unchanged), see RESULTS.md for why.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from lab.replay.options import ReplayOptions
from lab.sim.cost_model import ChunkCost, step_cost
from lab.sim.replay import run_simulated_replay
from lab.sim.spec import load_spec

SPECS = Path(__file__).resolve().parents[1] / "configs" / "sim"
MULTI = SPECS / "qwen3-omni-3xh100-vllm-omni.yaml"
SINGLE = SPECS / "qwen3-omni-2xh100-vllm-omni.yaml"
# (spec, concurrency, prompts, published mean TTFP ms, mean RTF, mean TPOT ms)
PUBLISHED = [(SINGLE, 1, 4, 329.0, 0.118, None), (MULTI, 8, 128, 325.2, 0.1689, 7.6955),
             (MULTI, 16, 128, 602.5, 0.2088, 10.6457), (MULTI, 24, 128, 699.4, 0.2397, 12.7363),
             (MULTI, 32, 128, 1024.1, 0.2791, 15.1608)]
INPUT_LEN, OUTPUT_LEN = 2500, 900


def simulate(spec: Path, concurrency: int, prompts: int, range_ratio: float) -> dict:
    options = ReplayOptions(simulate=str(spec), policy="fcfs-nooffload", num_requests=prompts,
                            max_concurrency=concurrency, random_input_len=INPUT_LEN, random_output_len=OUTPUT_LEN,
                            random_range_ratio=range_ratio)
    with open(os.devnull, "w") as quiet:
        return run_simulated_replay(options, log=quiet)


def decode_step_ms(spec: Path, batch: int) -> float:
    """The thinker's roofline decode step for `batch` replies halfway through (context 2,500 + 450)."""
    loaded = load_spec(str(spec))
    thinker = loaded.stages["thinker"]
    device = thinker.priced_on(loaded.devices[thinker.devices[0]])
    return step_cost(thinker.model, device, [ChunkCost(1, INPUT_LEN + OUTPUT_LEN // 2)] * batch).seconds * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--range-ratio", type=float, default=0.5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for spec, concurrency, prompts, ttfp, rtf, tpot in PUBLISHED:
        result = simulate(spec, concurrency, prompts, args.range_ratio)
        row = {"spec": spec.stem, "concurrency": concurrency, "prompts": prompts,
               "ttfp_ms": result["audio_ttfp_ms"]["mean"], "published_ttfp_ms": ttfp,
               "rtf": result["audio_rtf"]["mean"], "published_rtf": rtf,
               "decode_step_ms": decode_step_ms(spec, concurrency), "published_tpot_ms": tpot,
               "completed": result["num_completed"], "wall_s": result["simulated"]["wall_s"]}
        rows.append(row)
        print(f"c={concurrency:>2}: TTFP {row['ttfp_ms']:7.1f} ms vs {ttfp:7.1f} ({row['ttfp_ms'] / ttfp - 1:+.0%}), "
              f"RTF {row['rtf']:.3f} vs {rtf:.3f} ({row['rtf'] / rtf - 1:+.0%}), thinker decode step "
              f"{row['decode_step_ms']:.1f} ms vs TPOT {tpot or float('nan'):.1f}  [{row['wall_s']:.0f} s wall]",
              flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        document = {"simulated": True, "calibration": load_spec(str(MULTI)).calibration,
                    "range_ratio": args.range_ratio, "points": rows}
        args.out.write_text(json.dumps(document, indent=2))
        print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
