"""Does the simulated CPU price a step as the real one took it? Real step traces against the spec's price, by size.

    .venv/bin/python benchmarks/sim_price_check.py TRACE_DIR [TRACE_DIR ...] [--spec SPEC] [--out FILE]

Reads real servers' step traces (`--set runtime.trace_dir=DIR`), prices every traced step as the simulator
would (the spec's roofline and overheads, no jitter: the mean of its draws; a chunk's context is the positions
its request ran before it, as benchmarks/sim_fit_cpu.py reads them), and prints per stage and bin of new
positions in the step (1, 2-16, 17-64, 65-256, 257-512, over 512) the steps, their median measured and
priced times and the ratio of the summed times (priced / measured). A ratio far from 1 in one bin is a step
shape the fit did not see: the fit's runs (prompts of 32-96 tokens) had few long prefills.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from sim_fit_cpu import SPEC, chunk_cost, stage_steps

from lab.sim.cost_model import step_cost
from lab.sim.spec import load_spec

BINS = ((1, 1), (2, 16), (17, 64), (65, 256), (257, 512), (513, 10**9))


def price_bins(kind: str, steps, model, device) -> list[dict]:
    """One row per bin of new positions that has steps: count, median measured / priced ms, summed ratio."""
    rows = []
    for low, high in BINS:
        measured, priced = [], []
        for (_, seconds, chunks), _ in steps:
            if low <= sum(n for n, _ in chunks) <= high:
                measured.append(seconds)
                priced.append(step_cost(model, device, [chunk_cost(kind, n, start) for n, start in chunks]).seconds)
        if measured:
            rows.append({"positions": f"{low}-{high}" if high < 10**9 else f">{low - 1}", "steps": len(measured),
                         "measured_p50_ms": round(float(np.median(measured)) * 1000, 2),
                         "priced_p50_ms": round(float(np.median(priced)) * 1000, 2),
                         "priced_over_measured": round(sum(priced) / sum(measured), 2)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace_dirs", type=Path, nargs="+")
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    spec = load_spec(str(args.spec))
    found = {}
    for kind, stage in spec.stages.items():
        steps = stage_steps(args.trace_dirs, kind)
        found[kind] = price_bins(kind, steps, stage.model, stage.priced_on(spec.devices[stage.devices[0]]))
        for row in found[kind]:
            print(f"{kind:>8} {row['positions']:>9} positions: {row['steps']:>6} steps, measured p50 "
                  f"{row['measured_p50_ms']:>7} ms, priced p50 {row['priced_p50_ms']:>7} ms, "
                  f"priced / measured {row['priced_over_measured']}")
    if args.out is not None:
        args.out.write_text(json.dumps({"spec": str(args.spec), "trace_dirs": [str(d) for d in args.trace_dirs],
                                        "bins": found}, indent=1))


if __name__ == "__main__":
    main()
