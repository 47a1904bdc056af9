"""Admission gates: whether an arriving session may start, and how many may be live."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from liveserve.admission.registry import ADMISSION_GATES

if TYPE_CHECKING:
    from liveserve.admission.config import AdmissionConfig

DECISIONS = ("increase", "decrease", "hold")


@dataclass(frozen=True)
class Adjustment:
    """One run of a gate's control law: its decision, the cap after it, and what it saw."""

    at: float
    decision: str  # one of DECISIONS
    cap: int
    live: int
    p99_s: float | None  # the interval's p99 per-frame latency; None: no frame in the interval
    num_frames: int


class AdmissionGate(ABC):
    """Decides, per arriving session, whether it may start.

    Contract:
    - `cap` is how many sessions may be live now: at least 1, never above the
      gate's maximum (server.max_sessions).
    - `admit(live, now)` is asked once per arriving session, `live` being the
      sessions already open; it admits iff live < cap and counts the decision
      (`num_admitted`, `num_rejected`). An admitted session is live once the caller
      opens it; `admit` changes nothing else.
    - `observe_frame(latency_s, now)` reports one measured per-frame latency.
    - `tick(live, now)` is called periodically, more often than the gate's control
      interval. A gate with a control law runs it once its interval has passed,
      counts the decision in `adjustments` (by name, see DECISIONS), keeps it as
      `last` and returns it; otherwise `tick` returns None. The base class has no
      control law: it ignores frames and ticks.
    - Every call comes from one thread with a non-decreasing `now`; a gate never
      reads a clock (tests drive it with a fake one).
    """

    def __init__(self) -> None:
        self.num_admitted = 0
        self.num_rejected = 0
        self.adjustments = dict.fromkeys(DECISIONS, 0)
        self.last: Adjustment | None = None

    @property
    @abstractmethod
    def cap(self) -> int:
        """How many sessions may be live now."""

    def admit(self, live: int, now: float) -> bool:
        admitted = live < self.cap
        if admitted:
            self.num_admitted += 1
        else:
            self.num_rejected += 1
        return admitted

    def observe_frame(self, latency_s: float, now: float) -> None:
        """One frame's latency (seconds); ignored by gates without a control law."""

    def tick(self, live: int, now: float) -> Adjustment | None:
        """Run the control law if its interval has passed; None when nothing ran."""
        return None

    def record(self, adjustment: Adjustment) -> Adjustment:
        self.adjustments[adjustment.decision] += 1
        self.last = adjustment
        return adjustment


class FixedAdmission(AdmissionGate):
    """A constant cap: server.max_sessions."""

    def __init__(self, max_sessions: int) -> None:
        super().__init__()
        self.max_sessions = max_sessions

    @classmethod
    def from_config(cls, config: AdmissionConfig, frame_budget_s: float, max_cap: int) -> FixedAdmission:
        """The gate for `max_cap` sessions (what the registry makes: the config and frame budget play no part)."""
        return cls(max_cap)

    @property
    def cap(self) -> int:
        return self.max_sessions


def make_admission(config: AdmissionConfig, frame_budget_s: float, max_cap: int) -> AdmissionGate:
    """The gate `config.policy` names, for frames of `frame_budget_s` and at most `max_cap` sessions."""
    return ADMISSION_GATES.make(config.policy, config, frame_budget_s, max_cap)
