"""The result object `liveserve bench duplex` writes, and its printed summary.

Times are seconds from the start of the run (the first session offered); latencies
are the server's `latency_ms` of each `liveserve.duplex.frame` event (from the tick
that made the frame due to its last thinker token). Non-finite numbers are null.

| field | definition |
|---|---|
| `stalled_sessions` | sessions that stalled at least once: a frame was due (its audio sent) and no frame event came for longer than `stall_threshold_s` = max(1 s, 3 frame periods) |
| `stalls` | every stall: `{session, start_s, end_s, duration_s}` |
| `peak_occupancy` | highest thinker KV pool occupancy polled (0-1) |
| `occupancy` | `[[t, occupancy], ...]`, one per /metrics poll (every 0.5 s) |
| `t_sat_measured_s` | when occupancy first reached 0.99; null if it never did |
| `t_sat_predicted_s` | poll time + the server's time to saturation at the first poll at least 10 s after every session was streaming that carried a finite one (`t_sat_predicted_at_s` is that poll's time); null if none did |
| `frame_latency_ms` | per 10-s bucket of arrival time: `{start_s, end_s, frames, frames_per_s, count, p50, p90, p99, max}` (`count`: frames with a latency) |
| `frame_latency_overall_ms` | the same over the whole run |
| `frames_total`, `frames_per_s` | frame events received, and per second of the run |
| `sessions` | `{offered, admitted, rejected, failed, closed_by_server}` |
| `errors` | server error events other than rejections: `{session, t, code, message}` |
| `failures` | sessions that failed on the client's side: `{session, failure}` |
| `per_session` | admitted sessions: `{session, session_id, offered_s, admitted_s, frames_due, frames, context_tokens, latency_p99_ms, stalls}` (`context_tokens`: the context length the frame events reached) |
| `server` | per poll: `{t, occupancy, t_sat_s, live_sessions, admission_cap, saturation_warning}` |
| `resident_tokens` | per poll: `{t, max, mean}` of the live sessions' resident thinker tokens |
| `ramp` | ramp runs: `{rate, offered, admitted, rejected, settled_cap, settled_live, timeline}`, the timeline per poll `{t, offered, admitted, rejected, live, cap, live_server}`; null otherwise |
| `warnings` | what makes the figures doubtful (failed /metrics polls, more frames answered than sent) |
| `config` | the run's options and the served settings |
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lab.duplex.analysis import latency_buckets, latency_summary, run_stalls, stall_threshold_s
from lab.duplex.ramp import ramp_summary
from lab.duplex.records import REJECTED, MetricsPoll, SessionLog
from lab.duplex.saturation import (
    all_streaming_t,
    measured_t_sat,
    occupancy_timeline,
    peak_occupancy,
    predicted_t_sat,
    resident_tokens_timeline,
)
from lab.result_json import format_number, json_safe


@dataclass(frozen=True)
class RunLog:
    """Everything a run observed."""

    sessions: Sequence[SessionLog]
    polls: Sequence[MetricsPoll]
    duration_s: float
    frame_ms: int
    ramp_rate: float | None = None
    num_failed_polls: int = 0


def build_result(run: RunLog, config: Mapping[str, Any]) -> dict[str, Any]:
    """The result object documented above, ready for `json.dumps(..., allow_nan=False)`."""
    frames = [frame for log in run.sessions for frame in log.frames]
    stalls = run_stalls(run.sessions, run.frame_ms)
    predicted, predicted_at = predicted_t_sat(run.polls, all_streaming_t(run.sessions))
    result = {
        "stalled_sessions": len({stall.session for stall in stalls}),
        "stalls": [{"session": s.session, "start_s": s.start_s, "end_s": s.end_s, "duration_s": s.duration_s}
                   for s in stalls],
        "stall_threshold_s": stall_threshold_s(run.frame_ms),
        "peak_occupancy": peak_occupancy(run.polls),
        "occupancy": occupancy_timeline(run.polls),
        "t_sat_measured_s": measured_t_sat(run.polls),
        "t_sat_predicted_s": predicted,
        "t_sat_predicted_at_s": predicted_at,
        "frame_latency_ms": latency_buckets(frames, run.duration_s),
        "frame_latency_overall_ms": latency_summary(frame.latency_ms for frame in frames),
        "frames_total": len(frames),
        "frames_per_s": len(frames) / run.duration_s,
        "sessions": _session_counts(run.sessions),
        "errors": [{"session": log.index, "t": e.t, "code": e.code, "message": e.message}
                   for log in run.sessions for e in log.errors if e.code != REJECTED],
        "failures": [{"session": log.index, "failure": log.failure} for log in run.sessions if log.is_failed],
        "per_session": [_session_record(log, stalls) for log in run.sessions if log.is_admitted],
        "server": [_poll_record(poll) for poll in run.polls],
        "resident_tokens": resident_tokens_timeline(run.polls),
        "ramp": None if run.ramp_rate is None else ramp_summary(run.sessions, run.polls, run.duration_s, run.ramp_rate),
        "warnings": _warnings(run),
        "config": dict(config),
    }
    return json_safe(result, lambda _: None)  # NaN (not filling) and infinities are null


def _warnings(run: RunLog) -> list[str]:
    """What makes the figures doubtful: polls that failed, a server answering more frames than were sent."""
    warnings = [f"{run.num_failed_polls} /metrics polls failed"] if run.num_failed_polls else []
    extra = [log for log in run.sessions if len(log.frames) > len(log.frame_due_t) + 1]
    if extra:
        log = extra[0]
        warnings.append(f"session {log.index} received {len(log.frames)} frames for {len(log.frame_due_t)} frames of "
                        f"audio sent: the server's frame period is shorter than {run.frame_ms} ms (with --url, "
                        "give --frame-ms as the server's duplex.frame_ms); stalls are not reliable")
    return warnings


def _session_counts(logs: Sequence[SessionLog]) -> dict[str, int]:
    return {"offered": len(logs), "admitted": sum(log.is_admitted for log in logs),
            "rejected": sum(log.is_rejected for log in logs), "failed": sum(log.is_failed for log in logs),
            "closed_by_server": sum(log.server_closed_t is not None for log in logs)}


def _session_record(log: SessionLog, stalls: Sequence) -> dict[str, Any]:
    context = [frame.context_tokens for frame in log.frames if frame.context_tokens is not None]
    return {"session": log.index, "session_id": log.session_id, "offered_s": log.offered_t,
            "admitted_s": log.admitted_t, "frames_due": len(log.frame_due_t), "frames": len(log.frames),
            "context_tokens": max(context) if context else None,
            "latency_p99_ms": latency_summary(frame.latency_ms for frame in log.frames)["p99"],
            "stalls": sum(stall.session == log.index for stall in stalls)}


def _poll_record(poll: MetricsPoll) -> dict[str, Any]:
    return {"t": poll.t, "occupancy": poll.occupancy, "t_sat_s": poll.t_sat_s, "live_sessions": poll.live_sessions,
            "admission_cap": poll.admission_cap, "saturation_warning": poll.saturation_warning}


def format_summary(result: Mapping[str, Any]) -> str:
    """The headline figures, then one line per 10-s bucket."""
    sessions, overall = result["sessions"], result["frame_latency_overall_ms"]
    rows = [
        ("Sessions (offered / admitted / rejected / failed)",
         " / ".join(str(sessions[k]) for k in ("offered", "admitted", "rejected", "failed"))),
        ("Frames received (per s)", f"{result['frames_total']} ({format_number(result['frames_per_s'], 1)})"),
        ("Frame latency (ms) p50 / p90 / p99 / max",
         " / ".join(format_number(overall[k], 1) for k in ("p50", "p90", "p99", "max"))),
        ("Stalled sessions", f"{result['stalled_sessions']} ({len(result['stalls'])} stalls > "
                             f"{result['stall_threshold_s']:g} s)"),
        ("Peak KV occupancy", format_number(result["peak_occupancy"], 3)),
        ("t_sat measured / predicted (s)",
         f"{format_number(result['t_sat_measured_s'], 1)} / {format_number(result['t_sat_predicted_s'], 1)}"),
    ]
    if result["ramp"] is not None:
        ramp = result["ramp"]
        settled = f"{format_number(ramp['settled_cap'], 1)} / {format_number(ramp['settled_live'], 1)}"
        rows.append(("Ramp settled cap / live", settled))
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}}  {value}" for label, value in rows]
    lines.extend(f"warning: {warning}" for warning in result["warnings"])
    lines.append("")
    lines.append(f"{'bucket (s)':>12}  {'frames':>7}  {'p50':>8}  {'p90':>8}  {'p99':>8}  {'max':>8}  occupancy")
    occupancy = result["occupancy"]
    for bucket in result["frame_latency_ms"]:
        occ = [o for t, o in occupancy if bucket["start_s"] <= t < bucket["end_s"]]
        span = f"{bucket['start_s']:g}-{bucket['end_s']:g}"
        figures = "  ".join(f"{format_number(bucket[k], 1):>8}" for k in ("p50", "p90", "p99", "max"))
        lines.append(f"{span:>12}  {bucket['frames']:>7}  {figures}  {format_number(max(occ) if occ else None, 3)}")
    return "\n".join(lines)
