"""Issue 29, item 4: fit the simulated CPU's step times to a real tiny-omni server's step traces.

Reads the step traces a real server wrote (`--set runtime.trace_dir=DIR`: DIR/<stage>.jsonl, one line a
step with its requests and new positions), prices every traced step with the roofline of
configs/sim/tiny-omni-cpu.yaml's shapes and device (no overheads), and fits what the roofline leaves,
stage by stage, as overhead per step + per request in the step + per new position (least squares, no
negative term), and the spread of the steps around the fit as `step_jitter`: the standard deviation of
log(measured / fitted), with how that spread drifts over time (`step_jitter_slow_share` of its variance
correlated over `step_jitter_slow_s`, fitted to the residuals' correlation between steps 20 ms to 3 s
apart; lab/sim/step_noise.py). Several trace directories (runs of both policies, a duplex ramp) are fitted as one
set of steps. Prints the fitted knobs as the spec's YAML and, with --out, writes them with the fit's
residuals as JSON.

    liveserve bench replay ... --policy fcfs-lru --set runtime.trace_dir=/tmp/trace-fcfs   # the real run
    .venv/bin/python benchmarks/sim_fit_cpu.py /tmp/trace-fcfs --out benchmarks/results/sim_fit_cpu.json

A chunk's context is the positions its request ran before it in the trace (at most `--window`, the
sinks and window of a windowed run); a vocoder chunk also decodes its left context again, as the simulated
runner prices it.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np
from scipy.optimize import nnls

from lab.sim.cost_model import ChunkCost, step_cost
from lab.sim.spec import load_spec
from stages.models.vocoder import VocoderConfig

SPEC = Path(__file__).resolve().parents[1] / "configs" / "sim" / "tiny-omni-cpu.yaml"
KNOBS = ("step_overhead_ms", "row_overhead_ms", "token_overhead_ms")
JITTER = "step_jitter"
LAG_EDGES_S = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0)  # the residuals' correlation is fitted over these lags
SLOW_S_GRID = np.geomspace(0.05, 20.0, 60)


def traced_steps(path: Path) -> list:
    """Each traced step that ran chunks: (its start, its time, (new positions, positions its request ran
    before) per chunk)."""
    ran: dict[str, int] = defaultdict(int)
    steps = []
    for line in path.read_text().splitlines():
        step = json.loads(line)
        if not step["run"]:
            continue
        chunks = []
        for request_id, num_tokens in step["run"]:
            chunks.append((num_tokens, ran[request_id]))
            ran[request_id] += num_tokens
        steps.append((step["t"], step["dt"], chunks))
    return steps


def stage_steps(trace_dirs: list[Path], kind: str) -> list:
    """(step, the index of its trace directory) for every step of the `kind` stage."""
    return [(step, run) for run, trace_dir in enumerate(trace_dirs) if (trace_dir / f"{kind}.jsonl").exists()
            for step in traced_steps(trace_dir / f"{kind}.jsonl")]


def chunk_cost(kind: str, num_tokens: int, start: int, window: int | None = None) -> ChunkCost:
    if kind == "vocoder":
        return ChunkCost(num_tokens + min(start, VocoderConfig().left_context_frames), 0, 0)
    if kind == "encoder":
        return ChunkCost(num_tokens, 0, 0)
    return ChunkCost(num_tokens, start if window is None else min(start, window))


def fit_stage(kind: str, steps, model, device) -> dict:
    """Overheads (ms) that make roofline + overheads closest to the traced step times (each step with the
    window its run had, None for none), and the steps' spread around that fit."""
    bare = replace(device, step_overhead_s=0.0, row_overhead_s=0.0, token_overhead_s=0.0)
    rows, measured, roofline, starts, runs = [], [], [], [], []
    for (start, seconds, chunks), window, run in steps:
        costs = [chunk_cost(kind, n, start, window) for n, start in chunks]
        roofline.append(step_cost(model, bare, costs).seconds)
        rows.append((1.0, len(costs), sum(c.num_tokens for c in costs)))
        measured.append(seconds)
        starts.append(start)
        runs.append(run)
    x, y, r = np.array(rows), np.array(measured), np.array(roofline)
    knobs, _ = nnls(x, y - r)
    predicted = r + x @ knobs
    residuals = np.log(y / predicted)
    slow_share, slow_s = fit_drift(np.array(starts), residuals, np.array(runs))
    return {"steps": len(y), **{name: round(float(v) * 1000, 3) for name, v in zip(KNOBS, knobs)},
            JITTER: round(float(np.std(residuals)), 3), f"{JITTER}_slow_share": round(slow_share, 3),
            f"{JITTER}_slow_s": round(slow_s, 3),
            "measured_s": round(float(y.sum()), 2), "predicted_s": round(float(predicted.sum()), 2),
            "roofline_share": round(float(r.sum() / predicted.sum()), 3),
            "step_mean_ms": round(float(y.mean()) * 1000, 2),
            "abs_error_p50_ms": round(float(np.median(np.abs(predicted - y))) * 1000, 2)}


def lag_correlations(starts: np.ndarray, residuals: np.ndarray, runs: np.ndarray, max_ahead: int = 400):
    """The residuals' correlation between steps of one run a lag apart, per bin of LAG_EDGES_S: (the bins'
    middle lags, their correlations)."""
    centred = residuals - residuals.mean()
    sums = np.zeros((len(LAG_EDGES_S) - 1, 3))  # per bin: sum of products, sum of squares either side
    for ahead in range(1, min(max_ahead, len(starts))):
        lag = starts[ahead:] - starts[:-ahead]
        same = runs[ahead:] == runs[:-ahead]
        bins = np.digitize(lag, LAG_EDGES_S) - 1
        for b in range(len(LAG_EDGES_S) - 1):
            pick = same & (bins == b)
            left, right = centred[:-ahead][pick], centred[ahead:][pick]
            sums[b] += (left @ right, left @ left, right @ right)
    lags = np.sqrt(np.array(LAG_EDGES_S[:-1]) * np.array(LAG_EDGES_S[1:]))
    seen = sums[:, 1] > 0
    return lags[seen], sums[seen, 0] / np.sqrt(sums[seen, 1] * sums[seen, 2])


def fit_drift(starts: np.ndarray, residuals: np.ndarray, runs: np.ndarray) -> tuple[float, float]:
    """(slow share, correlation time): the share w and time tau of w * exp(-lag / tau) closest to the
    residuals' correlation over LAG_EDGES_S (least squares; w within 0..1); (0, 1) with too few lags."""
    lags, correlations = lag_correlations(starts, residuals, runs)
    if len(lags) < 2:
        return 0.0, 1.0
    best = (math.inf, 0.0, 1.0)
    for slow_s in SLOW_S_GRID:
        shape = np.exp(-lags / slow_s)
        share = float(np.clip(shape @ correlations / (shape @ shape), 0.0, 1.0))
        error = float(np.sum((share * shape - correlations) ** 2))
        best = min(best, (error, share, float(slow_s)))
    return best[1], best[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace_dirs", type=Path, nargs="+")
    parser.add_argument("--spec", type=Path, default=SPEC)
    parser.add_argument("--window", type=int, help="the windowed runs' sinks + window tokens")
    parser.add_argument("--windowed", type=Path, nargs="*", default=[],
                        help="trace directories of windowed runs (a duplex ramp), fitted with the others")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.windowed and args.window is None:
        parser.error("--windowed needs --window (the runs' sinks + window tokens)")
    spec = load_spec(str(args.spec))
    fits = {}
    for kind, stage in spec.stages.items():
        steps = stage_steps([*args.trace_dirs, *args.windowed], kind)
        steps = [(step, args.window if run >= len(args.trace_dirs) else None, run) for step, run in steps]
        if len(steps) < len(KNOBS):
            print(f"# {kind}: {len(steps)} traced steps, too few to fit; kept as the spec has it")
            continue
        fits[kind] = fit_stage(kind, steps, stage.model, spec.devices[stage.devices[0]])
    for kind, fit in fits.items():
        print(f"  {kind}:  # {fit['steps']} steps, mean {fit['step_mean_ms']} ms, median |error| "
              f"{fit['abs_error_p50_ms']} ms, busy {fit['measured_s']} s measured / {fit['predicted_s']} s fitted, "
              f"roofline {fit['roofline_share']:.0%} of it")
        for name in (*KNOBS, JITTER, f"{JITTER}_slow_share", f"{JITTER}_slow_s"):
            print(f"    {name}: {fit[name]}")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"trace_dirs": [str(d) for d in (*args.trace_dirs, *args.windowed)],
                                        "spec": str(args.spec),
                                        "fits": fits}, indent=2))


if __name__ == "__main__":
    main()
