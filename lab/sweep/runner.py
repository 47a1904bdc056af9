"""Run a sweep's points one after another, saving what finished after each."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from lab.sweep.report import write_report
from lab.sweep.spec import SweepSpec, describe

RESULTS_JSON = "results.json"


def run_sweep(
    spec: SweepSpec,
    out_dir: str | Path,
    run_point: Callable[[Any], dict[str, Any]],
    check_point: Callable[[Any], None],
    progress: TextIO | None = None,
) -> list[dict[str, Any]]:
    """Run every point of `spec` and report on them in `out_dir`; returns the records.

    `check_point` is called on every point (the options of the spec's command) before any
    runs; the first exception it raises propagates, with nothing run and nothing written.
    `run_point` then runs each point and returns its result (JSON-ready, as the command
    builds it: `lab.result_json`, `lab.duplex.result`); a point
    that raises an Exception is recorded with its message and the sweep goes on. Each
    record is `{"point": {grid field: value}, "result": dict | None, "error": str | None}`.
    `out_dir/results.json` is rewritten after every point, so a killed sweep keeps the
    points that finished; results.md and the plots are written at the end. Progress goes
    to `progress` (the current sys.stderr when None), one line per update.
    """
    points = spec.points()
    for options in points:
        check_point(options)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bar = _Progress(len(points), progress or sys.stderr)
    records: list[dict[str, Any]] = []
    for options in points:
        point = spec.point_of(options)
        bar.start(describe(point))
        result, error = _run(run_point, options)
        bar.finish(error)
        records.append({"point": point, "result": result, "error": error})
        _write_json(out / RESULTS_JSON, records)
    write_report(spec, records, out)
    return records


def _run(
    run_point: Callable[[Any], dict[str, Any]], options: Any
) -> tuple[dict[str, Any] | None, str | None]:
    try:
        return run_point(options), None
    except Exception as exc:  # a failed point is recorded; the sweep goes on
        return None, str(exc) or type(exc).__name__


def _write_json(path: Path, records: list[dict[str, Any]]) -> None:
    """Replace `path` whole, so a sweep killed mid-write leaves the previous version."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(records, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(partial, path)


class _Progress:
    """`[i/n] point` as a point starts; `[i/n] done in 41.2 s (elapsed 1m23s, ~4m10s left)` as it ends."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream = total, stream
        self.num_done, self.began, self.point_began = 0, time.monotonic(), 0.0

    def start(self, label: str) -> None:
        self.point_began = time.monotonic()
        self._line(f"[{self.num_done + 1}/{self.total}] {label}")

    def finish(self, error: str | None) -> None:
        now = time.monotonic()
        self.num_done += 1
        took = now - self.point_began
        outcome = f"done in {took:.1f} s" if error is None else f"failed after {took:.1f} s: {error.splitlines()[0]}"
        elapsed = now - self.began
        left = elapsed / self.num_done * (self.total - self.num_done)
        self._line(f"[{self.num_done}/{self.total}] {outcome} (elapsed {_clock(elapsed)}, ~{_clock(left)} left)")

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s"
