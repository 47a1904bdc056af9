"""The `liveserve bench sweep` command: a spec's points run one by one through its command, then the report."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run_sweep_command(spec_path: Path, out_dir: Path) -> int:
    """Exit status: 0 when every point ran, 1 when some failed, 2 for a bad spec or a point
    that cannot run in this build (checked before the first runs)."""
    from lab.sweep import load_sweep_spec, run_sweep

    try:
        spec = load_sweep_spec(spec_path)
        records = run_sweep(spec, out_dir, *point_runner(spec.command))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(records)} points -> {out_dir / 'results.md'}", file=sys.stderr)
    return 0 if all(record["error"] is None for record in records) else 1


def point_runner(command: str) -> tuple[Callable[[Any], dict[str, Any]], Callable[[Any], None]]:
    """How a point of a `command` sweep runs, and how it is checked before any runs."""
    if command == "duplex":
        from lab.duplex.run import check_duplex, run_duplex

        return run_duplex, check_duplex
    from lab.replay.run import check_replay, run_replay

    return run_replay, check_replay
