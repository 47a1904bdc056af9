"""Issue 30's duplex soak: does a windowed full-duplex stream keep the server's memory flat?

Starts `liveserve serve` (--config, or the lab's default, tiny-omni-cpu) on a free loopback port with a
thinker window, streams one duplex session of looped speech in real time for --minutes, samples the
resident set size of the server process and of every stage process (named ls-<stage>) every
--sample-s seconds from /proc, and fits each one's slope (MB/min, least squares) over the last half
of the run. Prints the figures and writes them, with every sample, to --out as JSON.

    .venv/bin/python benchmarks/duplex_soak.py                   # 10 minutes, window 256 + 16 sinks
    .venv/bin/python benchmarks/duplex_soak.py --minutes 1 --out benchmarks/results/soak_1min.json  # a quick check

Must hold (issue 30): server + stage RSS slope <= 0.2 MB/min over the last 5 min of a 10-minute
stream. Linux only (reads /proc). The thinker keeps the inputs of its last layers x window positions
(4 x 256 with the defaults: ~40 s of a stream), so a run shorter than ~2 minutes fits that filling
up, not the plateau.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.duplex.analysis import stall_threshold_s
from lab.duplex.options import DuplexOptions
from lab.duplex.records import SessionLog
from lab.duplex.run import fresh_server_overrides
from lab.duplex.speech_loop import LoopedSpeech
from lab.duplex.stream import StreamSetup, run_stream
from lab.process_memory import rss_mb, stage_processes
from lab.server_process import ServerProcess
from lab.server_target import ServedConfig

OUT = Path(__file__).resolve().parent / "results" / "duplex_soak.json"
MUST_HOLD_MB_PER_MIN = 0.2


def slope_mb_per_min(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, MB) points, in MB per minute; None with fewer than 3."""
    if len(points) < 3:
        return None
    return 60.0 * statistics.linear_regression([t for t, _ in points], [mb for _, mb in points]).slope


@dataclass
class RssLog:
    """RSS samples of the server and its stage processes: (run seconds, MB) per process name."""

    server_pid: int
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)

    def sample(self, t: float) -> None:
        processes = {"server": self.server_pid, **stage_processes(self.server_pid)}
        for name, pid in processes.items():
            mb = rss_mb(pid)
            if mb is not None:
                self.series.setdefault(name, []).append((t, mb))

    def total(self) -> list[tuple[float, float]]:
        """Server + stages at the times every process was sampled."""
        by_time: dict[float, list[float]] = {}
        for points in self.series.values():
            for t, mb in points:
                by_time.setdefault(t, []).append(mb)
        return [(t, sum(mbs)) for t, mbs in sorted(by_time.items()) if len(mbs) == len(self.series)]

    def slopes(self, since: float) -> dict[str, float | None]:
        named = {**self.series, "total": self.total()}
        return {name: slope_mb_per_min([p for p in points if p[0] >= since]) for name, points in named.items()}


async def soak(server: ServerProcess, options: DuplexOptions, sample_s: float, log: RssLog) -> SessionLog:
    """One duplex stream for `options.duration_s` while `log` samples RSS every `sample_s`."""
    start = time.monotonic()
    clock = lambda: time.monotonic() - start  # noqa: E731
    setup = StreamSetup(server.url, LoopedSpeech.from_dir(), options.frame_ms, options.chunk_ms, clock)
    end = options.duration_s
    session = SessionLog(0, 0.0)
    stream = asyncio.create_task(run_stream(session, setup, speech_start=0, stop_at=end,
                                            listen_until=end + stall_threshold_s(options.frame_ms)))
    next_report = 60.0
    while not stream.done():
        log.sample(clock())
        if clock() >= next_report:
            total = log.total()
            print(f"[{clock():6.0f} s] {len(session.frames)} frames, server + stages {total[-1][1]:.1f} MB", flush=True)
            next_report += 60.0
        await asyncio.wait([stream], timeout=sample_s)
    return stream.result()


def report(options: DuplexOptions, served: ServedConfig, session: SessionLog, log: RssLog) -> dict:
    half = options.duration_s / 2
    slopes = log.slopes(since=half)
    latencies = [f.latency_ms for f in session.frames if f.latency_ms is not None]
    return {
        "minutes": options.duration_s / 60, "frame_ms": options.frame_ms,
        "window": {"tokens": options.window, "sinks": options.sinks}, **served.describe(),
        "frames": len(session.frames), "failure": session.failure,
        "errors": [{"code": e.code, "message": e.message} for e in session.errors],
        "frame_latency_ms": {"p50": _quantile(latencies, 0.5), "p99": _quantile(latencies, 0.99)},
        "slope_from_s": half, "slope_mb_per_min": slopes,
        "rss_mb_first": {name: points[0][1] for name, points in log.series.items()},
        "rss_mb_last": {name: points[-1][1] for name, points in log.series.items()},
        "must_hold": {"total_slope_max_mb_per_min": MUST_HOLD_MB_PER_MIN,
                      "holds": slopes["total"] is not None and slopes["total"] <= MUST_HOLD_MB_PER_MIN
                      and session.failure is None and not session.errors},
        "samples": {name: [[round(t, 2), round(mb, 3)] for t, mb in points] for name, points in log.series.items()},
    }


def _quantile(values: list[float], q: float) -> float | None:
    return None if not values else sorted(values)[min(len(values) - 1, int(q * len(values)))]


def print_summary(result: dict) -> None:
    print(f"{result['frames']} frames in {result['minutes']:g} min; frame latency p50 "
          f"{result['frame_latency_ms']['p50']} ms, p99 {result['frame_latency_ms']['p99']} ms")
    if result["failure"] or result["errors"]:
        print(f"stream failure: {result['failure']}; errors: {result['errors']}")
    print(f"RSS slope over the last half (from {result['slope_from_s']:g} s), MB/min; first -> last MB:")
    for name, slope in result["slope_mb_per_min"].items():
        first, last = result["rss_mb_first"].get(name), result["rss_mb_last"].get(name)
        shown = "n/a" if slope is None else f"{slope:+.3f}"
        span = "" if first is None else f"   {first:.1f} -> {last:.1f}"
        print(f"  {name:<12} {shown:>8}{span}")
    verdict = "holds" if result["must_hold"]["holds"] else "does NOT hold"
    print(f"must hold: server + stages slope <= {MUST_HOLD_MB_PER_MIN} MB/min: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long the stream runs (default 10)")
    parser.add_argument("--window", type=int, default=256, help="thinker window tokens (default 256)")
    parser.add_argument("--sinks", type=int, default=16, help="thinker window sink tokens (default 16)")
    parser.add_argument("--frame-ms", type=int, default=80, help="duplex frame period (default 80)")
    parser.add_argument("--sample-s", type=float, default=5.0, help="seconds between RSS samples (default 5)")
    parser.add_argument("--config", type=Path, help="server config (default: the lab's, tiny-omni-cpu)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"result JSON (default {OUT})")
    args = parser.parse_args()
    options = DuplexOptions(sessions=1, duration_s=60.0 * args.minutes, frame_ms=args.frame_ms, window=args.window,
                            sinks=args.sinks, config=args.config)
    served = ServedConfig.load(options.config, fresh_server_overrides(options))
    with ServerProcess(served.source, served.overrides) as server:
        log = RssLog(server.proc.pid)
        session = asyncio.run(soak(server, options, args.sample_s, log))
    result = report(options, served, session, log)
    print_summary(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
