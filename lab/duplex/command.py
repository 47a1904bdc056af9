"""The `liveserve bench duplex` command line: flags -> DuplexOptions, result -> summary, JSON and plots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.duplex.options import ADMISSION_POLICIES, DuplexOptions, parse_settings
from lab.result_json import write_json
from lab.server_process import ServerStartError
from liveserve.audio_io import AudioError
from liveserve.config.document import add_override_argument
from stages.config import HISTORIES


def add_duplex_arguments(parser: argparse.ArgumentParser) -> None:
    streams = parser.add_argument_group("streams")
    streams.add_argument("--sessions", type=int,
                         help="continuous speech streams (with --ramp: the server's session limit)")
    streams.add_argument("--duration-s", type=float, required=True, help="how long the streams speak (s)")
    streams.add_argument("--frame-ms", type=int, default=80,
                         help="the server's duplex frame period: a multiple of 80 in [80, 2000]")
    streams.add_argument("--stagger-ms", type=float,
                         help="stream starts spread over this span (default: one frame period)")
    streams.add_argument("--chunk-ms", type=int, default=40,
                         help="audio per append, sent every as many ms of wall clock")
    streams.add_argument("--ramp", type=float, metavar="RATE",
                         help="offer sessions open-loop at RATE per second instead")
    streams.add_argument("--session-s", type=float, help="with --ramp: each admitted session hangs up after this long")
    streams.add_argument("--speech-dir", type=Path, help="WAV clips to loop (default: the speech fixtures)")
    server = parser.add_argument_group("server (a fresh one per run, or a running one)")
    server.add_argument("--config", type=Path,
                        help="start the server from this YAML (default: the lab's, tiny-omni-cpu)")
    server.add_argument("--window", type=int,
                        help="thinker window: tokens kept besides the sinks (default: unbounded)")
    server.add_argument("--sinks", type=int, help="thinker window: sink tokens kept from the start (default 0)")
    server.add_argument("--history", choices=HISTORIES,
                        help="thinker window: a history branch for what leaves it (default: none)")
    server.add_argument("--kv-blocks", type=int, help="thinker KV pool size in blocks")
    server.add_argument("--admission", choices=ADMISSION_POLICIES, help="admission policy (default: aimd with --ramp)")
    server.add_argument("--admission-set", action="append", default=[], metavar="NAME=VALUE",
                        help="override one admission setting, e.g. target=0.45 (repeatable)")
    add_override_argument(server, "stages.thinker.kv.block_size=32, applied after the flags above")
    server.add_argument("--simulate", metavar="SPEC",
                        help="simulate the server in virtual time on a shipped sim spec (e.g. qwen3-omni-1xh200) "
                             "or a spec file; the result says it is simulated")
    server.add_argument("--url", help="realtime URL of a running server on loopback, e.g. "
                        "ws://127.0.0.1:8000/v1/realtime (give --frame-ms as its duplex.frame_ms)")
    output = parser.add_argument_group("output")
    output.add_argument("--poll-interval-s", type=float, default=0.5, help="how often /metrics is read")
    output.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the unmeasured warm-up session")
    output.add_argument("--result-json", type=Path, help="write the result object here")
    output.add_argument("--plot-dir", type=Path, help="write PNG plots here")


def options_from_args(args: argparse.Namespace) -> DuplexOptions:
    return DuplexOptions(
        sessions=args.sessions, duration_s=args.duration_s, frame_ms=args.frame_ms, window=args.window,
        sinks=args.sinks, history=args.history, ramp=args.ramp, session_s=args.session_s, admission=args.admission,
        admission_set=parse_settings("--admission-set", args.admission_set), config=args.config,
        kv_blocks=args.kv_blocks, overrides=tuple(args.overrides), url=args.url, stagger_ms=args.stagger_ms,
        chunk_ms=args.chunk_ms, speech_dir=args.speech_dir, poll_interval_s=args.poll_interval_s, warmup=args.warmup,
        simulate=args.simulate,
    )


def run_duplex_command(args: argparse.Namespace) -> int:
    """Exit status: 0 when the run completed with no session failing on the client's side
    (rejections, stalls and server errors are results), 1 when some failed, 2 for a bad
    option or config, or a server that would not start or does not stream duplex frames."""
    from lab.duplex.run import DuplexBenchError, run_duplex
    from lab.sim.duplex import run_simulated_duplex

    try:
        options = options_from_args(args)
        result = (run_duplex if options.simulate is None else run_simulated_duplex)(options)
    except (ValueError, ServerStartError, AudioError, DuplexBenchError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from lab.duplex.result import format_summary

    print(format_summary(result))
    if args.result_json is not None:
        write_json(args.result_json, result)
    if args.plot_dir is not None:
        from lab.duplex.plots import draw_plots

        paths = draw_plots(result, args.plot_dir)
        print(f"plots written to {', '.join(str(p) for p in paths)}", file=sys.stderr)
    return 0 if result["sessions"]["failed"] == 0 else 1
