"""The ramp experiment's figures: sessions offered, admitted and rejected over time against the
admission cap. Pure functions of the session logs and /metrics polls (times in run seconds)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from lab.duplex.analysis import latency_summary
from lab.duplex.records import MetricsPoll, SessionLog

SETTLED_FRACTION = 1 / 3  # the last third of the run is where a settled controller is judged


def ramp_timeline(logs: Sequence[SessionLog], polls: Sequence[MetricsPoll]) -> list[dict]:
    """Per poll: `t`; `offered`, `admitted`, `rejected` (cumulative, by the client's clock);
    `live` (admitted, not yet ended, by the client); the server's `cap` and `live_server`."""
    return [{"t": poll.t,
             "offered": sum(log.offered_t <= poll.t for log in logs),
             "admitted": sum(log.admitted_t is not None and log.admitted_t <= poll.t for log in logs),
             "rejected": sum(log.rejected_t is not None and log.rejected_t <= poll.t for log in logs),
             "live": sum(_is_live(log, poll.t) for log in logs),
             "cap": poll.admission_cap, "live_server": poll.live_sessions}
            for poll in polls]


def _is_live(log: SessionLog, t: float) -> bool:
    if log.admitted_t is None or log.admitted_t > t:
        return False
    ended = log.server_closed_t if log.server_closed_t is not None else log.end_t
    return ended is None or ended > t


def settled(timeline: Sequence[dict], key: str, duration_s: float, fraction: float = SETTLED_FRACTION) -> float | None:
    """The median of `key` over the timeline's last `fraction` of the run (None without values)."""
    values = [row[key] for row in timeline if row[key] is not None and row["t"] >= duration_s * (1 - fraction)]
    return float(statistics.median(values)) if values else None


def ramp_summary(logs: Sequence[SessionLog], polls: Sequence[MetricsPoll], duration_s: float, rate: float) -> dict:
    """Totals, the timeline until the streams stop, where the cap and the live count settled, and
    the per-frame latency of the frames received while settled (`settled_latency_ms`)."""
    timeline = ramp_timeline(logs, [poll for poll in polls if poll.t <= duration_s])
    settled_from = duration_s * (1 - SETTLED_FRACTION)
    return {
        "rate": rate,
        "offered": len(logs),
        "admitted": sum(log.is_admitted for log in logs),
        "rejected": sum(log.is_rejected for log in logs),
        "settled_cap": settled(timeline, "cap", duration_s),
        "settled_live": settled(timeline, "live_server", duration_s),
        "settled_latency_ms": latency_summary(frame.latency_ms for log in logs for frame in log.frames
                                              if settled_from <= frame.t <= duration_s),
        "timeline": timeline,
    }
