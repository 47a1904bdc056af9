"""What a duplex run observed, as plain records. Times are seconds from the start of the run."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

REJECTED = "session_capacity_exceeded"


@dataclass(frozen=True, slots=True)
class FrameEvent:
    """One `liveserve.duplex.frame` event, received at `t`: the session's context length
    (positions so far) as the server gave it, or None."""

    t: float
    frame_index: int
    latency_ms: float | None
    context_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ServerError:
    """One `error` event, received at `t`."""

    t: float
    code: str | None
    message: str


@dataclass
class SessionLog:
    """One offered session, as its client saw it.

    `frame_due_t[k]` is when the audio completing frame k had been sent (the frame is
    due from then on); `frames` are the frame events in order of arrival. The session
    was admitted at `admitted_t` (`session.created`), or rejected at `rejected_t` (a
    `session_capacity_exceeded` error), or failed (`failure` says how: no connection,
    duplex refused, connection lost). `server_closed_t` is when the server closed it
    mid-run; `end_t` when its client stopped listening (either way).
    """

    index: int
    offered_t: float
    session_id: str | None = None
    admitted_t: float | None = None
    rejected_t: float | None = None
    stream_start_t: float | None = None
    server_closed_t: float | None = None
    end_t: float | None = None
    failure: str | None = None
    frame_due_t: array = field(default_factory=lambda: array("d"))
    frames: list[FrameEvent] = field(default_factory=list)
    errors: list[ServerError] = field(default_factory=list)

    @property
    def is_admitted(self) -> bool:
        return self.admitted_t is not None

    @property
    def is_rejected(self) -> bool:
        return self.rejected_t is not None

    @property
    def is_failed(self) -> bool:
        return self.failure is not None


@dataclass(frozen=True)
class MetricsPoll:
    """The server's figures read from one GET /metrics at `t`; None where it exports none.

    `t_sat_s` is the thinker pool's predicted time to saturation (NaN: not filling);
    `resident_tokens` holds the `max` and `mean` of the live sessions' resident thinker tokens.
    """

    t: float
    occupancy: float | None = None
    t_sat_s: float | None = None
    live_sessions: float | None = None
    admission_cap: float | None = None
    saturation_warning: float | None = None
    resident_tokens: dict[str, float] = field(default_factory=dict)
