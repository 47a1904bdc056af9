"""A stage's timeline, one JSON line per step that did something: for finding where a request waits."""

from __future__ import annotations

import json
from pathlib import Path

from stages.plan import SchedulerPlan


class StepTrace:
    """Appends to `path` one line per step that planned a chunk or saw a request become ready:

    `{"t": clock time of the round, "dt": seconds its batch computed, "ready": [request ids
    that got work this round], "run": [[request id, positions], ...], "preempted": [...]}`.
    The clock is the scheduler's (time.monotonic in a server: comparable across processes).
    Written from the engine thread only; each line is flushed as written (readable at once).
    """

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8", buffering=1)

    def record(self, t: float, dt: float, plan: SchedulerPlan) -> None:
        self.write(t, dt, plan.ready, [(c.request.request_id, c.num_tokens) for c in plan.chunks], plan.preempted)

    def write(self, t: float, dt: float, ready: list[str], run: list[tuple[str, int]], preempted: list[str]) -> None:
        """One step's line, unless it ran, readied and preempted nothing."""
        if not run and not ready and not preempted:
            return
        line = {"t": round(t, 6), "dt": round(dt, 6), "ready": ready, "run": run, "preempted": preempted}
        self._file.write(json.dumps(line) + "\n")

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
