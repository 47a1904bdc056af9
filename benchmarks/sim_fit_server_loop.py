"""Fit the simulator's server-loop prices (a spec's `server` section; lab/sim/server_loop.py) to a real server.

A real tiny-omni server run with the probe of benchmarks/server_loop_probe/ writes, a line a second, how long its
event loop was busy and what it did meanwhile: client messages read, events sent, stage outputs routed by kind,
VAD batches. The loop's busy seconds are fitted as a price per message and per routed output (least squares, no
negative price; the events sent go with the outputs that make them, and a price of their own or per stage kind
fits no better), over the seconds of every file given (runs of both policies and of several scenarios, so the
mix of work varies) in which the loop kept up: busy less than `--max-busy` of the second. A saturated second's
busy time holds more than the work it counts (the backlog's own overhead, the threads reading the stages' pipes
contending for the interpreter), and fitted with them the prices come out higher. The VAD batches' time on their
worker thread is fitted as a price per step and per window. Prints the `server` section in ms, and with --out
writes it with the fit's residuals as JSON. The prices are wall time on the probed machine under the probed load
(benchmarks/log/2026-12-02-server-loop-sim.md has a fit and how far it carries from one scenario to another).

    LIVESERVE_LOOP_PROBE=/tmp/loop-fcfs.jsonl PYTHONPATH=benchmarks/server_loop_probe:. \\
        .venv/bin/liveserve bench replay ... --policy fcfs-lru        # the real run (and one with liveserve)
    .venv/bin/python benchmarks/sim_fit_server_loop.py /tmp/loop-fcfs.jsonl /tmp/loop-liveserve.jsonl

The probe serves on asyncio's loop instead of uvloop (its selector is where the waiting is measured), so the
prices are the asyncio loop's: the Python work (JSON, base64, resampling, pickling to the stages) is the same,
uvloop's own I/O is cheaper.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import nnls

LOOP_TERMS = ("message", "output")
THREAD_TERMS = ("vad_step", "vad_window")
MAX_BUSY = 0.85


def read_seconds(paths: list[Path], max_busy: float = 1.0) -> list[dict]:
    """The probed seconds of the loop's life in which it was busy less than `max_busy` of the time, the first of
    each file (its start) left out."""
    seconds = [json.loads(line) for path in paths for line in path.read_text().splitlines()[1:]]
    return [s for s in seconds if s["wall"] - s["idle"] < max_busy * s["wall"]]


def loop_terms(second: dict) -> list[float]:
    return [second["messages"], sum(second["routed"].values())]


def fit(rows: list[list[float]], seconds: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Prices (least squares, none negative) and the residual of each row, in seconds."""
    terms, measured = np.array(rows, float), np.array(seconds, float)
    prices, _ = nnls(terms, measured)
    return prices, measured - terms @ prices


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("probes", nargs="+", type=Path, help="the probe's files (LIVESERVE_LOOP_PROBE)")
    parser.add_argument("--max-busy", type=float, default=MAX_BUSY, help="fit the seconds in which the loop was busy "
                        f"less than this share of the time (default {MAX_BUSY})")
    parser.add_argument("--out", type=Path, help="write the prices and the fit's residuals here as JSON")
    args = parser.parse_args()
    seconds = read_seconds(args.probes, args.max_busy)
    loop_prices, loop_residuals = fit([loop_terms(s) for s in seconds], [s["wall"] - s["idle"] for s in seconds])
    scored = [s for s in seconds if s["vad_batches"]]
    vad_prices, vad_residuals = fit([[s["vad_steps"], s["vad_windows"]] for s in scored], [s["vad_s"] for s in scored])
    prices = zip(LOOP_TERMS + THREAD_TERMS, [*loop_prices, *vad_prices])
    section = {f"{name}_ms": round(1000 * float(price), 3) for name, price in prices}
    busy = sum(s["wall"] - s["idle"] for s in seconds) / sum(s["wall"] for s in seconds)
    print(f"{len(seconds)} seconds fitted (busy < {args.max_busy:.0%}), the loop busy {busy:.0%} of them; "
          f"fit residual {1000 * np.sqrt(np.mean(loop_residuals ** 2)):.0f} ms a second (loop), "
          f"{1000 * np.sqrt(np.mean(vad_residuals ** 2)):.0f} ms (VAD thread)")
    print(yaml.safe_dump({"server": section}, sort_keys=False, default_flow_style=False), end="")
    if args.out is not None:
        args.out.write_text(json.dumps({"probes": [str(p) for p in args.probes], "max_busy": args.max_busy,
                                        "server": section, "seconds": len(seconds),
                                        "loop_rms_residual_s": float(np.sqrt(np.mean(loop_residuals ** 2))),
                                        "vad_rms_residual_s": float(np.sqrt(np.mean(vad_residuals ** 2)))}, indent=1))


if __name__ == "__main__":
    main()
