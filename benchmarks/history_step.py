"""What the history branch (`window.history: ssm`) costs a thinker step: tiny-omni's thinker (tiny-omni-cpu's
shape, seeded weights, float32, the stage's scheduler and runner as served) with N duplex streams in a window
of 96 tokens after 4 sinks, each fed 40 frames of 6 rows and answering each with 2 tokens. Every step of the
last 20 frames is timed in the runner: prefill steps (a frame's rows for every stream) and decode steps apart,
the median of each. Variants, run in turn --rounds times: `off` (window only), `torch` (the branch, scanned in
torch) and `c` (the branch, scanned by kernels/history_scan.c, as a served CPU stage runs it). Run from the
repository root:

    .venv/bin/python benchmarks/history_step.py [--streams 48] [--rounds 2] [--out benchmarks/results/history_step.json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvtier import KVCacheManager, KVPoolConfig  # noqa: E402
from liveserve.config.loader import load_config  # noqa: E402
from stages.config import SamplingParams, SchedulerConfig, WindowSpec  # noqa: E402
from stages.kv_residency import KVResidency  # noqa: E402
from stages.models.history import use_scan_kernel  # noqa: E402
from stages.models.llama import LlamaForCausalLM, add_history  # noqa: E402
from stages.models.packed_linear import pack_linears  # noqa: E402
from stages.models.weights import init_deterministic  # noqa: E402
from stages.requests import DuplexFrame, DuplexRequest  # noqa: E402
from stages.runners.decoder import ThinkerRunner  # noqa: E402
from stages.scheduler import Scheduler  # noqa: E402

VARIANTS = ("off", "torch", "c")
FRAMES, MEASURED_FROM, FRAME_ROWS, ANSWER_TOKENS = 40, 20, 6, 2


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


CONFIG = load_config("tiny-omni-cpu").pipeline.thinker.model


def runner_for(variant: str, window: WindowSpec, kv: KVCacheManager) -> ThinkerRunner:
    model = LlamaForCausalLM(CONFIG)
    init_deterministic(model, 0)
    if variant != "off":
        add_history(model, 0)
    pack_linears(model)
    runner = ThinkerRunner(model, kv, window)
    if variant == "torch":
        use_scan_kernel(model, None)
    return runner


def step_times(variant: str, num_streams: int) -> dict[str, float]:
    """Median ms of the measured prefill and decode steps."""
    window = WindowSpec(96, 4, None if variant == "off" else "ssm")
    kv = KVCacheManager(KVPoolConfig(2048, CONFIG.num_layers, CONFIG.num_kv_heads, CONFIG.head_dim, 16))
    clock = Clock()
    scheduler = Scheduler(SchedulerConfig(max_num_seqs=64, max_num_batched_tokens=512), kv, clock,
                          residency=KVResidency(kv, window=window))
    runner = runner_for(variant, window, kv)
    sampling = SamplingParams(temperature=0.0, max_tokens=ANSWER_TOKENS)
    streams = [DuplexRequest(f"s{i}", 0.0, frozenset(), math.inf, sampling, prefix=[1, 2, 3, 4])
               for i in range(num_streams)]
    for stream in streams:
        scheduler.add(stream)
    times: dict[str, list[float]] = {"prefill": [], "decode": []}
    generator = torch.Generator().manual_seed(0)
    for frame in range(FRAMES):
        for stream in streams:
            rows = torch.randn(FRAME_ROWS, CONFIG.hidden_size, generator=generator)
            stream.append(DuplexFrame(frame, [7] * FRAME_ROWS, rows))
        while any(stream.is_generating for stream in streams):
            clock.t += 0.01
            plan = scheduler.schedule()
            start = time.perf_counter()
            output = runner.execute(plan)
            if frame >= MEASURED_FROM:
                kind = "prefill" if any(chunk.num_tokens > 1 for chunk in plan.chunks) else "decode"
                times[kind].append(1000 * (time.perf_counter() - start))
            scheduler.update_from_output(plan, output)
    return {kind: statistics.median(values) for kind, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "history_step.json")
    args = parser.parse_args()
    torch.set_num_threads(2)
    runs = []
    for round_index in range(args.rounds):
        for variant in VARIANTS:
            runs.append({"round": round_index, "variant": variant, **step_times(variant, args.streams)})
            print(f"round {round_index} {variant:5s} prefill {runs[-1]['prefill']:6.2f} ms  "
                  f"decode {runs[-1]['decode']:6.2f} ms", flush=True)
    summary = {}
    for variant in VARIANTS[1:]:
        pairs = [(run, base) for run in runs for base in runs
                 if run["variant"] == variant and base["variant"] == "off" and run["round"] == base["round"]]
        summary[variant] = {kind: [round(run[kind] / base[kind], 3) for run, base in pairs]
                            for kind in ("prefill", "decode")}
        print(f"{variant}: step time over off, per round: {summary[variant]}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"streams": args.streams, "runs": runs, "ratio_to_off": summary}, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
