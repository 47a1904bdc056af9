"""AIMD admission: the cap follows the measured per-frame latency."""

from __future__ import annotations

import math
from collections import deque

from liveserve.admission.config import AdmissionConfig
from liveserve.admission.gate import Adjustment, AdmissionGate

FLOOR_EPSILON = 1e-9  # live x factor that is a whole number in exact arithmetic stays that number
MAX_PROBE_BACKOFF = 8  # a probe waits at most this many times probe_wait_s


def p99(latencies: list[float]) -> float | None:
    """The nearest-rank 99th percentile: the maximum when there are 100 samples or fewer."""
    if not latencies:
        return None
    ordered = sorted(latencies)
    return ordered[math.ceil(0.99 * len(ordered)) - 1]


class AIMDAdmission(AdmissionGate):
    """Additive increase, multiplicative decrease of the cap, once per `config.interval_s`.

    At the end of an interval, the p99 of the frames of the last `config.window_s`: over
    target x frame budget for the `config.decrease_after`-th judgment in a row ->
    decrease to max(min_cap, floor(live x decrease_factor)) (a decrease never raises the
    cap); over target before that -> hold, and the next judgment sees only frames after
    this one, so one slow moment is not judged twice; otherwise, when a whole window has
    passed since the last change of the cap (or the first tick), cap - 1 <= live <= cap
    (sessions approach the cap from below: above it, after a drop, the load is already
    more than the cap allows) and cap < max_cap -> increase by one; else hold. Every
    change forgets the frames before it, so each step is judged on a whole window of
    frames at the load it let in. No frames in the window: hold. The first tick starts
    the first interval.

    Probing backs off (`config.probe_wait_s`; None: never). A decrease sets the
    ceiling to the live count that was too much. An increase to a cap at or above
    the ceiling is a probe: it waits for `probe_wait` (at first probe_wait_s) of good
    frames instead of one window. A decrease after a probe doubles probe_wait (at most
    MAX_PROBE_BACKOFF x probe_wait_s); an increase past a probed level means that
    level held: probe_wait goes back to probe_wait_s and the ceiling moves up to the
    next level. So the cap returns quickly to just below the load that failed and
    tries that load again ever more rarely while it keeps failing.
    """

    def __init__(self, config: AdmissionConfig, frame_budget_s: float, max_cap: int) -> None:
        if config.min_cap > max_cap:
            raise ValueError(f"min_cap ({config.min_cap}) exceeds the maximum of {max_cap} sessions")
        super().__init__()
        self.config, self.max_cap = config, max_cap
        self.limit_s = config.target * frame_budget_s
        self._cap = min(config.initial_cap, max_cap)
        self._frames: deque[tuple[float, float]] = deque()  # (time, latency) within the window
        self._interval_start: float | None = None
        self._evidence_since = 0.0  # frames from here on count toward an increase
        self._ceiling: int | None = None  # the lowest load a probe has not yet shown to hold
        self._probe_wait = config.probe_wait_s
        self._probing = False  # the last change raised the cap to the ceiling or above
        self._violations = 0  # judgments over target in a row

    @property
    def cap(self) -> int:
        return self._cap

    def observe_frame(self, latency_s: float, now: float) -> None:
        self._frames.append((now, latency_s))

    def tick(self, live: int, now: float) -> Adjustment | None:
        if self._interval_start is None:
            self._interval_start = self._evidence_since = now
        if now - self._interval_start < self.config.interval_s:
            return None
        while self._frames and self._frames[0][0] <= now - self.config.window_s:
            self._frames.popleft()
        latency, num_frames = p99([latency for _, latency in self._frames]), len(self._frames)
        decision = self._decide(live, latency, now)
        self._interval_start = now
        return self.record(Adjustment(now, decision, self._cap, live, latency, num_frames))

    def _decide(self, live: int, latency: float | None, now: float) -> str:
        if latency is None:
            return "hold"
        if latency > self.limit_s:
            self._violations += 1
            if self._violations < self.config.decrease_after:
                return self._changed("hold", now)
            self._violations = 0
            self._back_off(live)
            lowered = math.floor(live * self.config.decrease_factor + FLOOR_EPSILON)
            self._cap = min(self._cap, max(self.config.min_cap, lowered))
            return self._changed("decrease", now)
        self._violations = 0
        if now - self._evidence_since < self._wait_before_increase():
            return "hold"
        if self._cap - 1 <= live <= self._cap < self.max_cap:
            self._probe_held_or_started()
            self._cap += 1
            return self._changed("increase", now)
        return "hold"

    def _next_increase_is_probe(self) -> bool:
        return self._probe_wait is not None and self._ceiling is not None and self._cap + 1 >= self._ceiling

    def _wait_before_increase(self) -> float:
        return self._probe_wait if self._next_increase_is_probe() else self.config.window_s

    def _back_off(self, live: int) -> None:
        if self._probe_wait is None:
            return
        if self._probing:
            self._probe_wait = min(2 * self._probe_wait, MAX_PROBE_BACKOFF * self.config.probe_wait_s)
        self._ceiling, self._probing = live, False

    def _probe_held_or_started(self) -> None:
        if not self._next_increase_is_probe():
            return
        if self._cap >= self._ceiling:  # a whole probe wait of good frames at the ceiling
            self._probe_wait = self.config.probe_wait_s
        self._ceiling, self._probing = max(self._ceiling, self._cap + 1), True

    def _changed(self, decision: str, now: float) -> str:
        self._frames.clear()
        self._evidence_since = now
        return decision
