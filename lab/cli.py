"""`liveserve bench engine | replay | sweep | duplex`: the benchmarks' own command line.

A plugin of `liveserve.cli` (the entry point `bench` in pyproject.toml): it gets the arguments after
`bench`, so the serving commands never import the benchmarks. Exit statuses are those of `liveserve`:
2 with the help when no command is given, or with one line naming a bad input.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from lab.duplex.command import add_duplex_arguments
from lab.replay.command import add_replay_arguments
from liveserve.command_runner import run_command
from liveserve.config.loader import LAB_CONFIG, load_config
from liveserve.config.reader import ConfigError


def main(argv: list[str]) -> int:
    """Run `liveserve bench ARGV...`; returns the exit status."""
    with _terminate_as_exit():
        return run_command(bench_parser(), argv)


@contextmanager
def _terminate_as_exit() -> Iterator[None]:
    """A SIGTERM (a timeout, a cancelled job, `kill`) unwinds the benchmark as Ctrl-C does, so the fresh
    servers it started are stopped, not left running (on the main thread; elsewhere signals are not ours)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _exit_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_terminated(signum: int, frame: object) -> None:
    sys.exit(128 + signum)


def bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="liveserve bench", description="Benchmarks of a LiveServe server and engine")
    commands = parser.add_subparsers()
    engine = commands.add_parser("engine", help="thinker prefill/decode throughput at batch 1, 16, 64")
    engine.add_argument("--config", type=Path, help=f"YAML config or a shipped config by name (default: {LAB_CONFIG})")
    engine.add_argument("--batch-sizes", default="1,16,64")
    engine.add_argument("--json", type=Path, help="also write the result here")
    engine.set_defaults(handler=_cmd_engine)
    replay = commands.add_parser("replay", help="replay a workload over /v1/realtime and measure it")
    add_replay_arguments(replay)
    replay.set_defaults(handler=_cmd_replay)
    sweep = commands.add_parser("sweep", help="a replay or duplex run at every point of a grid; results JSON, "
                                "table and plots")
    sweep.add_argument("--spec", type=Path, required=True, help="the sweep's YAML spec")
    sweep.add_argument("--out", type=Path, required=True, help="directory for results.json, results.md and plots")
    sweep.set_defaults(handler=_cmd_sweep)
    duplex = commands.add_parser("duplex", help="continuous full-duplex speech streams: per-frame latency, "
                                 "KV occupancy, stalls")
    add_duplex_arguments(duplex)
    duplex.set_defaults(handler=_cmd_duplex)
    return parser


def _cmd_engine(args: argparse.Namespace) -> int:
    from lab.engine import format_table, run_engine_bench

    try:
        batches = tuple(int(b) for b in args.batch_sizes.split(","))
    except ValueError:
        raise ConfigError(f"--batch-sizes must be comma-separated integers, got {args.batch_sizes!r}") from None
    result = run_engine_bench(load_config(args.config, default=LAB_CONFIG), batches)
    print(format_table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    from lab.replay.command import run_replay_command

    return run_replay_command(args)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from lab.sweep.command import run_sweep_command

    return run_sweep_command(args.spec, args.out)


def _cmd_duplex(args: argparse.Namespace) -> int:
    from lab.duplex.command import run_duplex_command

    return run_duplex_command(args)
