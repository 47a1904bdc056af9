"""`liveserve tiny-qwen3-omni DIR`: write a seeded tiny random Qwen3-Omni model folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from liveserve.command_runner import run_command


def main(argv: list[str]) -> int:
    """Write a tiny Qwen3-Omni folder (`liveserve tiny-qwen3-omni ARGS`). Exit status 0 with one line naming
    the folder; 2 with one line naming the bad argument (an unknown shape, a DIR that is not an empty folder)."""
    return run_command(_parser(), argv)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="liveserve tiny-qwen3-omni",
                                     description="write a seeded tiny random Qwen3-Omni model folder")
    parser.add_argument("dir", type=Path, help="the folder to write (new, or empty)")
    parser.add_argument("--shape", default="tiny-a", help="a preset of lab.qwen3_omni.tiny_folder.SHAPES")
    parser.add_argument("--seed", type=int, default=0, help="the seed the weights are drawn from")
    parser.set_defaults(handler=_write)
    return parser


def _write(args: argparse.Namespace) -> int:
    from transformers.utils import logging

    from lab.qwen3_omni.tiny_folder import SHAPES, write_tiny_folder

    if args.shape not in SHAPES:
        return _bad_argument(f"--shape: unknown shape {args.shape!r} (known: {', '.join(SHAPES)})")
    if args.dir.exists() and not (args.dir.is_dir() and not any(args.dir.iterdir())):
        return _bad_argument(f"DIR: {args.dir} exists and is not an empty folder")
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    folder = write_tiny_folder(args.dir, SHAPES[args.shape], args.seed)
    print(f"wrote Qwen3-Omni {args.shape} (seed {args.seed}) to {folder}")
    return 0


def _bad_argument(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2
