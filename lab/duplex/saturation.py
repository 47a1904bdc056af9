"""The thinker KV pool over a run: occupancy, its peak, and when it saturated, measured and predicted.

Pure functions of the /metrics polls (see `records.MetricsPoll`) and the session logs;
times are seconds from the start of the run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from lab.duplex.records import MetricsPoll, SessionLog

SATURATED = 0.99  # occupancy at which the pool counts as full
PREDICT_AFTER_S = 10.0  # every session has streamed this long before a prediction counts


def occupancy_timeline(polls: Iterable[MetricsPoll]) -> list[list[float]]:
    """`[[t, occupancy], ...]` of the polls that carried one."""
    return [[poll.t, poll.occupancy] for poll in polls if poll.occupancy is not None]


def peak_occupancy(polls: Iterable[MetricsPoll]) -> float | None:
    values = [poll.occupancy for poll in polls if poll.occupancy is not None]
    return max(values) if values else None


def measured_t_sat(polls: Iterable[MetricsPoll], level: float = SATURATED) -> float | None:
    """When occupancy first reached `level`; None if it never did."""
    return next((poll.t for poll in polls if poll.occupancy is not None and poll.occupancy >= level), None)


def all_streaming_t(logs: Iterable[SessionLog]) -> float | None:
    """When the last admitted session started streaming (None if none did)."""
    starts = [log.stream_start_t for log in logs if log.stream_start_t is not None]
    return max(starts) if starts else None


def predicted_t_sat(polls: Sequence[MetricsPoll], since_t: float | None,
                    after_s: float = PREDICT_AFTER_S) -> tuple[float | None, float | None]:
    """`(prediction, poll time)`: the server's forecast from the first poll taken at least
    `after_s` after `since_t` (all sessions streaming) that carried a finite time to
    saturation, as a run time: poll time + t_sat. `(None, None)` if there is none."""
    if since_t is None:
        return None, None
    for poll in polls:
        if poll.t >= since_t + after_s and poll.t_sat_s is not None and math.isfinite(poll.t_sat_s):
            return poll.t + max(0.0, poll.t_sat_s), poll.t
    return None, None


def resident_tokens_timeline(polls: Iterable[MetricsPoll]) -> list[dict[str, float]]:
    """Per poll with sessions: `{t, max, mean}` of the sessions' resident thinker tokens."""
    return [{"t": poll.t, **poll.resident_tokens} for poll in polls if poll.resident_tokens]
