"""Per-frame figures of a duplex run: latency percentiles per time bucket, stalls, frame rate.

Pure functions of what the clients logged (see `records`); times are seconds from the
start of the run. Percentiles are numpy's linear ones, as in `lab.metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from lab.duplex.records import FrameEvent, SessionLog

BUCKET_S = 10.0
PERCENTILES = (50, 90, 99)
MIN_STALL_S = 1.0
STALL_FRAMES = 3


def latency_summary(latencies_ms: Iterable[float | None]) -> dict[str, float | int | None]:
    """`{count, p50, p90, p99, max}` over the values given; the figures are None when there are none."""
    values = np.asarray([v for v in latencies_ms if v is not None], dtype=float)
    if values.size == 0:
        return {"count": 0, **dict.fromkeys([f"p{p}" for p in PERCENTILES] + ["max"])}
    return {"count": int(values.size), **{f"p{p}": float(np.percentile(values, p)) for p in PERCENTILES},
            "max": float(values.max())}


def latency_buckets(frames: Iterable[FrameEvent], duration_s: float, bucket_s: float = BUCKET_S) -> list[dict]:
    """Per-frame latency per `bucket_s` of the run, by when the frame event arrived.

    Buckets tile [0, duration_s); frames arriving later (the run's last frames, drained
    after the streams stop) count in the last bucket. Each bucket has `start_s`, `end_s`,
    `frames` (events received), `frames_per_s` and the latency summary of those frames.
    """
    num_buckets = max(1, math.ceil(duration_s / bucket_s))
    latencies: list[list[float | None]] = [[] for _ in range(num_buckets)]
    for frame in frames:
        latencies[min(max(0, int(frame.t // bucket_s)), num_buckets - 1)].append(frame.latency_ms)
    buckets = []
    for index, values in enumerate(latencies):
        start, end = index * bucket_s, min((index + 1) * bucket_s, duration_s)
        buckets.append({"start_s": start, "end_s": end, "frames": len(values),
                        "frames_per_s": len(values) / (end - start), **latency_summary(values)})
    return buckets


def stall_threshold_s(frame_ms: float) -> float:
    """How long a session may go without a frame event while one is due: max(1 s, 3 frame periods)."""
    return max(MIN_STALL_S, STALL_FRAMES * frame_ms / 1000)


@dataclass(frozen=True)
class Stall:
    """Session `session` was owed a frame and received nothing from `start_s` to `end_s`."""

    session: int
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def find_stalls(due_t: Sequence[float], received_t: Sequence[float], end_t: float,
                threshold_s: float) -> list[tuple[float, float]]:
    """The intervals longer than `threshold_s` in which a frame was due and none arrived.

    Frames arrive in order: the k-th event answers frame k, due at `due_t[k]`. While
    waiting for frame k the session is owed since the later of its due time and the
    previous event; the wait ends at event k, or at `end_t` (the end of observation)
    if it never came. Events beyond the frames due are ignored.
    """
    stalls = []
    previous = -math.inf
    for k, due in enumerate(due_t):
        owed_since = max(due, previous)
        answered = received_t[k] if k < len(received_t) else end_t
        if answered - owed_since > threshold_s:
            stalls.append((owed_since, answered))
        if k >= len(received_t):
            break
        previous = answered
    return stalls


def session_stalls(log: SessionLog, threshold_s: float) -> list[Stall]:
    """The stalls of one admitted session, observed until its client stopped listening or the
    server closed it."""
    if log.end_t is None:
        return []
    end_t = log.end_t if log.server_closed_t is None else min(log.end_t, log.server_closed_t)
    received = [frame.t for frame in log.frames]
    return [Stall(log.index, start, end) for start, end in find_stalls(log.frame_due_t, received, end_t, threshold_s)]


def run_stalls(logs: Iterable[SessionLog], frame_ms: float) -> list[Stall]:
    """Every stall of every session, by session then time."""
    threshold = stall_threshold_s(frame_ms)
    return [stall for log in logs for stall in session_stalls(log, threshold)]
