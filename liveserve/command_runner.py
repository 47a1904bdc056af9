"""How every `liveserve` command line runs a command: one exit-status rule for serving and the benchmarks."""

from __future__ import annotations

import argparse
import sys

from liveserve.audio_io import AudioError
from liveserve.config.reader import ConfigError


def run_command(parser: argparse.ArgumentParser, argv: list[str]) -> int:
    """Parse `argv` and run the chosen command's handler: its exit status, or 2 with the help
    (no command given) or with one line naming a bad input (a config, audio or file mistake)."""
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        return 2
    try:
        return args.handler(args)
    except (ConfigError, AudioError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
