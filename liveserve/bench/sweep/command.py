"""The `liveserve bench sweep` command: a spec's points run one by one, then the report."""

from __future__ import annotations

import sys
from pathlib import Path


def run_sweep_command(spec_path: Path, out_dir: Path) -> int:
    """Exit status: 0 when every point ran, 1 when some failed, 2 for a bad spec or a point
    that cannot run in this build (checked before the first runs)."""
    from liveserve.bench.replay.run import check_replay, run_replay
    from liveserve.bench.sweep import load_sweep_spec, run_sweep

    try:
        records = run_sweep(load_sweep_spec(spec_path), out_dir, run_replay, check_replay)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(records)} points -> {out_dir / 'results.md'}", file=sys.stderr)
    return 0 if all(record["error"] is None for record in records) else 1
